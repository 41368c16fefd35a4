"""What an Api process holds for its life: the in-process and Ray twins of the
rate limits, trending, dispatch and decode slots, the stream hub, semantic
search clients and the in-process copies of the search indexes."""
