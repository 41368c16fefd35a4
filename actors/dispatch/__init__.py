"""The dispatch actor's room: the Dispatcher (plain class), its Ray actor, and
what it works with, the e-mail it sends (mail) and how a notification reads
(notices, which the notification service shares)."""
