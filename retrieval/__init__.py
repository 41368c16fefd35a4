"""Retrieval that embeds nothing: the code-aware BM25 index (lexical), its
per-node folder (lexical_store), and the fusion of the lexical and the vector
candidates of one search (fusion). Below serve_app; independent of embeddings
and actors."""
