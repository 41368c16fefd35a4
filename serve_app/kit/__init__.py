"""Small helpers with no knowledge of requests or doors: keys and passwords,
slugs, image checks, multipart parsing, outbound calls, after-commit hooks,
the error types."""
