"""Event streams: long-lived doors over the same services as the REST routes."""
