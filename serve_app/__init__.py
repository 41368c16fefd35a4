"""Cairn's HTTP surface: the app factory, routers, schemas, services and the Serve graph."""
