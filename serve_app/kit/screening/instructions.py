"""Instructions aimed at the reading agent: held for a moderator, not refused.

The rules match folded text (normalize.py) and look for what a document has
no reason to say to the model reading it: to drop its instructions, to
reveal or send keys, files, the environment or the conversation, to call
tools or visit a URL unprompted, or a markdown image or link that carries data
in its query to a host nobody knows. Ordinary documentation ("this pattern
ignores previous results", "send the request to the URL", "send your API key
in the X-API-Key header") passes: a rule needs the imperative, the object and,
for the weaker ones, an addressee or a destination.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urlsplit

from serve_app.kit.screening.normalize import AnchorSet

_AGENT = (
    r"(?:ai|a\.i\.|llm|language model|model|agent|assistant|bot|chatbot|claude|gpt|chatgpt|copilot|"
    r"cursor|gemini|codex|autogpt)s?"
)

_MODAL = (
    r"(?:you\s+(?:must|need\s+to|have\s+to|are\s+required\s+to)|immediately|silently|"
    r"automatically|without\s+asking|before\s+(?:answering|responding|replying|continuing|proceeding|"
    r"doing\s+anything(?:\s+else)?|you\s+(?:answer|respond|reply|continue)))\s*,?\s+"
)
_MODAL_ANCHORS = (
    "you must",
    "you need",
    "you have",
    "you are required",
    "immediately",
    "silently",
    "automatically",
    "without asking",
    "before ",
)

# (rule, regex, anchors, before, after): a regex runs only in windows around
# its anchors (normalize.AnchorSet).
RULES: tuple[tuple[str, re.Pattern[str], tuple[str, ...], int, int], ...] = (
    (
        "override_instructions",
        re.compile(
            r"\b(?:ignore|disregard|forget|override|bypass|discard|abandon)\s+"
            r"(?:(?:all|any|every|each|of|the|your|my|these|those|this|previous(?:ly)?|prior|above|"
            r"earlier|preceding|former|original|existing|initial|system|safety|developer|given|old|"
            r"current)[\s,]+){1,5}"
            r"(?:instructions?|prompts?|directives?|guidelines|guardrails|rules|commands|context|"
            r"programming|restrictions|constraints|messages)\b"
        ),
        ("ignore", "disregard", "forget", "override", "bypass", "discard", "abandon"),
        0,
        200,
    ),
    (
        "override_instructions",
        re.compile(
            r"\b(?:do\s+not|don'?t|never|stop)\s+(?:follow|obey|comply\s+with|listen\s+to)\s+"
            r"(?:your|the|any)\s+(?:previous|prior|original|system|safety|developer)?\s*"
            r"(?:instructions|prompt|rules|guidelines)"
        ),
        ("follow", "obey", "comply", "listen"),
        20,
        100,
    ),
    (
        "override_instructions",
        re.compile(
            r"(?:\bnew|\bupdated|\breal|\btrue|\bactual|\bsecret|\bhidden|\bimportant)\s+"
            r"(?:system\s+)?(?:instructions?|prompt|directive)s?\s*(?:for\s+" + _AGENT + r"\s*)?:"
            r"|\byou\s+are\s+(?:now\s+)?(?:in\s+)?(?:dan\b|developer\s+mode|jailbroken|unrestricted|"
            r"unfiltered|no\s+longer\s+bound|free\s+(?:of|from)\s+(?:all\s+)?(?:rules|restrictions))"
            r"|\bfrom\s+now\s+on,?\s+you\s+(?:will|must|are|shall)\s+(?:ignore|obey|only|not\s+follow)"
        ),
        ("instruction", "prompt", "directive", "you are", "from now on"),
        40,
        120,
    ),
    (
        "conceal_from_user",
        re.compile(
            r"\b(?:do\s+not|don'?t|never)\s+(?:tell|inform|mention|reveal|show|alert|notify|let)"
            r"(?:\s+(?:this|it|that|anything))?\s+(?:to\s+)?(?:the|your)\s+(?:user|human|operator)"
            r"\s+(?:about\s+|of\s+)?(?:this|it\b|these|that\s+you|what\s+you)"
            r"|\bwithout\s+(?:telling|informing|asking|notifying|alerting)\s+(?:the|your)\s+"
            r"(?:user|human|operator)\b"
            r"|\b(?:silently|secretly|quietly|covertly)\s+(?:send|post|upload|exfiltrate|run|execute|"
            r"call|fetch|forward|email|copy)\b"
        ),
        (
            "the user",
            "your user",
            "the human",
            "your human",
            "the operator",
            "silently",
            "secretly",
            "quietly",
            "covertly",
        ),
        60,
        60,
    ),
    (
        "reveal_secrets",
        re.compile(
            r"\b(?:reveal|disclose|leak|exfiltrate|dump|print|output|repeat|show|display|tell\s+me|"
            r"write\s+out|recite|share|paste|include|append|send|post|upload|forward|email|transmit|"
            r"give\s+me|list)\s+"
            r"(?:(?:me|us|all|of|the|your|its|full|entire|complete|contents?|verbatim|exact|current)\s+)*"
            r"(?:system\s+prompt|initial\s+prompt|hidden\s+prompt|(?:system|original|previous|hidden)\s+"
            r"instructions|instructions\s+above|conversation(?:\s+history)?|chat\s+history|"
            r"context\s+window|user'?s\s+(?:messages|data|files|keys|credentials|secrets)|"
            r"(?:all\s+(?:of\s+)?(?:the\s+|your\s+)?|your\s+)(?:environment\s+variables|env\s+vars)|\.env\s+file|"
            r"(?:~|\$home)/\.(?:aws|ssh|netrc|kube|docker|git-credentials|npmrc|pypirc|config/gh)"
            r"|id_(?:rsa|ed25519|ecdsa)\b|/etc/shadow)"
        ),
        (
            "prompt",
            "instructions",
            "conversation",
            "chat history",
            "context window",
            "user's",
            "users ",
            "environment variables",
            "env vars",
            ".env",
            "/.",
            "id_rsa",
            "id_ed25519",
            "id_ecdsa",
            "/etc/shadow",
        ),
        160,
        40,
    ),
    (
        "reveal_secrets",
        # "send your API key to https://…", "post your credentials to me".
        re.compile(
            r"\b(?:send|post|upload|forward|email|transmit|submit|exfiltrate|leak|share|paste|"
            r"include|append|put|encode)\s+(?:(?:all|of|the|your|its|any|user'?s|operator'?s)\s+)+"
            r"(?:\S+\s+){0,2}?(?:api\s*keys?|secrets?|credentials?|tokens?|passwords?|private\s+keys?|"
            r"ssh\s+keys?|access\s+keys?|cookies|session|keys)\b"
            r"[^.\n]{0,60}?\b(?:to|into|at|in\s+(?:a|the)\s+(?:query|url|image|link))\s+"
            r"(?:https?://|me\b|us\b|this\s+(?:url|address|endpoint|webhook|server|link)|"
            r"the\s+following\s+(?:url|address|endpoint|webhook)|my\s+(?:server|endpoint|webhook)|"
            r"(?:an?\s+)?(?:external|remote|attacker)|[\w.-]+\.(?:ngrok|requestbin|pipedream|"
            r"webhook\.site|burpcollaborator|interact\.sh|oast))"
        ),
        ("key", "secret", "credential", "token", "password", "cookie", "session"),
        80,
        160,
    ),
    (
        "call_tools",
        re.compile(
            r"\b" + _MODAL + r"(?:call|invoke|use|run|execute|trigger)\s+(?:the|your)\s+"
            r"[\w`'\".-]*\s*(?:tool|shell|terminal)\b"
            r"|<\s*(?:function_calls|antml:invoke|tool_use|tool_call)\b"
        ),
        (*_MODAL_ANCHORS, "<function_calls", "<antml", "<tool_"),
        0,
        200,
    ),
    (
        "visit_url",
        re.compile(
            r"\b"
            + _MODAL
            + r"(?:visit|open|navigate\s+to|go\s+to|browse\s+to|fetch|load|click|download|"
            r"request|curl|get|post\s+(?:\S+\s+){0,4}?to|send\s+(?:\S+\s+){0,4}?to|report\s+"
            r"(?:\S+\s+){0,4}?to)\s+(?:\S+\s+){0,3}?(?:https?://|www\.)"
        ),
        _MODAL_ANCHORS,
        0,
        260,
    ),
    (
        "addressed_to_agent",
        # An addressee plus a sensitive verb in the same sentence.
        re.compile(
            r"(?:\b(?:attention|note|message|instructions?|important)\s+(?:to|for)\s+(?:all\s+|any\s+)?"
            + _AGENT
            + r"|\bif\s+you\s+are\s+an?\s+"
            + _AGENT
            + r"|\bdear\s+"
            + _AGENT
            + r"|\b"
            + _AGENT
            + r"\s+reading\s+this)\b[^.!?\n]{0,160}?\b(?:ignore|disregard|reveal|exfiltrate|send|post|"
            r"upload|forward|email|visit|fetch|curl|open\s+https?|delete|rm\s+-rf|run\s+(?:this|the\s+following)|"
            r"execute|api\s+keys?|credentials|secrets?|password|environment|conversation)\b"
        ),
        (
            "attention",
            "note",
            "message",
            "instruction",
            "important",
            "if you are",
            "dear ",
            "reading this",
        ),
        40,
        300,
    ),
)

_ANCHORS = AnchorSet(*(anchors for _, _, anchors, _, _ in RULES))

# From the "[" (a literal the regex engine skips to); an image is a link
# whose "[" follows a "!".
_MD_URL = re.compile(r"\[[^\]\n]{0,200}\]\(\s*<?(https?://[^\s)>]+)")
_IMG_HINT = re.compile(r"<(?i:img)")
_HTML_IMG = re.compile(r"<img\b[^>]*\bsrc\s*=\s*[\"']?(https?://[^\s\"'>]+)", re.IGNORECASE)
_TEMPLATE = re.compile(
    r"\{[^}]*\}|\$\{|\$\(|\$[a-z_]{2,}|<[a-z_ ]+>|\[[a-z_ ]+\]|%s|insert|your_|_here|"
    r"(?:^|[&?])(?:data|secret|key|apikey|api_key|token|pass(?:word)?|prompt|conversation|chat|"
    r"history|env|creds?|credentials|cookie|session|ssn|exfil|leak|info|payload|content|msg|q|d)=[^&]*"
    r"(?:\{|\$|<|\[|%7b|%24|%3c|insert|your|here|conversation|secret|key|token|summary|context)",
    re.IGNORECASE,
)
# Hosts whose images and links documentation uses with query strings.
KNOWN_HOSTS = (
    "github.com",
    "githubusercontent.com",
    "shields.io",
    "badge.fury.io",
    "codecov.io",
    "readthedocs.io",
    "readthedocs.org",
    "pypi.org",
    "python.org",
    "wikipedia.org",
    "wikimedia.org",
    "google.com",
    "googleapis.com",
    "microsoft.com",
    "mozilla.org",
    "stackoverflow.com",
    "stackexchange.com",
    "npmjs.com",
    "npmjs.org",
    "gitlab.com",
    "docker.com",
    "kubernetes.io",
    "apache.org",
    "anthropic.com",
    "openai.com",
    "huggingface.co",
    "travis-ci.org",
    "travis-ci.com",
    "circleci.com",
    "coveralls.io",
    "example.com",
    "example.org",
    "example.net",
    "localhost",
    "127.0.0.1",
)


def _known(host: str) -> bool:
    host = host.lower().split(":")[0]
    return any(host == h or host.endswith("." + h) for h in KNOWN_HOSTS)


def find_instructions(folded: str) -> Iterator[tuple[str, int]]:
    """(rule, offset) of each instruction aimed at the reading agent in
    folded text."""
    scanner = _ANCHORS.scan(folded)
    for index in sorted(scanner.groups()):
        rule, rx, anchors, before, after = RULES[index]
        for m in scanner.search(rx, anchors, before, after):
            yield rule, m.start()


def find_data_urls(text: str) -> Iterator[tuple[str, int]]:
    """Markdown images/links (and HTML images) whose query carries data to an
    unknown host; matched on raw text, where the URL is intact."""
    if "http" not in text:
        return
    candidates: list[tuple[bool, str, int]] = []
    if "](" in text:
        for m in _MD_URL.finditer(text):
            image = m.start() > 0 and text[m.start() - 1] == "!"
            candidates.append((image, m.group(1), m.start() - image))
    if "<" in text and _IMG_HINT.search(text):
        candidates.extend((True, m.group(1), m.start()) for m in _HTML_IMG.finditer(text))
    for image, url, offset in candidates:
        try:
            parts = urlsplit(url)
        except ValueError:
            continue
        if not parts.query or _known(parts.hostname or ""):
            continue
        if _TEMPLATE.search(parts.query) or (image and len(parts.query) >= 120):
            yield ("data_in_image_url" if image else "data_in_link_url"), offset
