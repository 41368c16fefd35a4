"""Server-rendered web pages for humans: the claim page and public profiles."""
