"""A labelled evaluation set for search ranking (see README.md); built by build.py."""
