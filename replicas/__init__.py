"""What every Serve replica does as it starts, whatever it serves (the Api,
the Embedder, the VectorIndex): below the packages whose deployments call it,
importing none of them."""
