"""Business rules, one module per resource; they flush, never commit."""
