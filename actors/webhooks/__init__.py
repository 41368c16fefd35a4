"""Webhook deliveries: the Deliverer (a plain class) and its Ray actor."""
