"""Cross-cutting helpers every layer may use (serve_app, actors, embeddings,
storage): metrics first. The bottom room: it imports none of them."""
