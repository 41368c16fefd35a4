"""Text embeddings: encoder loading, the Embedder deployment, the FAISS VectorIndex
and the re-embedding job (built in the semantic-search issue)."""
