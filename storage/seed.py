"""The seeded category list (idempotent upsert by slug, run on every start)."""

from __future__ import annotations

import psycopg

from storage.db import libpq_url

# slug, name, description, colour, icon (lucide icon names)
CATEGORIES: list[tuple[str, str, str, str, str]] = [
    (
        "automation",
        "Automation & Workflows",
        "Recipes that chain tools and steps into repeatable workflows.",
        "#2563EB",
        "workflow",
    ),
    (
        "web-scraping",
        "Web Scraping & Extraction",
        "Fetching, parsing and extracting structured data from the web.",
        "#0891B2",
        "globe",
    ),
    (
        "research",
        "Research Techniques",
        "Finding, verifying and synthesising information.",
        "#7C3AED",
        "microscope",
    ),
    (
        "code-generation",
        "Code Generation",
        "Writing, refactoring and reviewing code.",
        "#16A34A",
        "code",
    ),
    (
        "debugging-testing",
        "Debugging & Testing",
        "Finding faults and proving fixes.",
        "#DC2626",
        "bug",
    ),
    (
        "data-analysis",
        "Data Analysis",
        "Cleaning, analysing and visualising data.",
        "#EA580C",
        "bar-chart-3",
    ),
    (
        "prompt-engineering",
        "Prompt Engineering",
        "Instructions, context and output shaping for models.",
        "#DB2777",
        "message-square",
    ),
    (
        "api-integration",
        "API Integration",
        "Calling, authenticating against and combining external APIs.",
        "#0D9488",
        "plug",
    ),
    (
        "devops",
        "DevOps & Infrastructure",
        "Deploying, operating and scaling systems.",
        "#4B5563",
        "server",
    ),
    (
        "security",
        "Security",
        "Safe handling of secrets, input and untrusted content.",
        "#B91C1C",
        "shield",
    ),
    (
        "agent-architecture",
        "Agent Architecture",
        "Planning, control loops and agent design.",
        "#9333EA",
        "bot",
    ),
    (
        "memory-retrieval",
        "Memory & Retrieval",
        "Long-term memory, RAG and semantic search.",
        "#CA8A04",
        "database",
    ),
    ("tool-use", "Tool Use", "Choosing and driving tools, function calling.", "#65A30D", "wrench"),
    (
        "multi-agent",
        "Multi-Agent Coordination",
        "Agents that delegate, negotiate and collaborate.",
        "#0284C7",
        "users",
    ),
]

_UPSERT = """
INSERT INTO categories (id, slug, name, description, color, icon_name, sort_order)
VALUES (gen_random_uuid(), %s, %s, %s, %s, %s, %s)
ON CONFLICT (slug) DO UPDATE SET name = EXCLUDED.name, description = EXCLUDED.description,
    color = EXCLUDED.color, icon_name = EXCLUDED.icon_name, sort_order = EXCLUDED.sort_order
"""


def seed_categories(database_url: str) -> int:
    with psycopg.connect(libpq_url(database_url)) as conn:
        with conn.cursor() as cur:
            cur.executemany(
                _UPSERT,
                [(s, n, d, c, i, pos) for pos, (s, n, d, c, i) in enumerate(CATEGORIES)],
            )
        conn.commit()
    return len(CATEGORIES)
