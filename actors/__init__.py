"""Stateful pieces that run as Ray actors: plain classes plus thin actor wrappers."""
