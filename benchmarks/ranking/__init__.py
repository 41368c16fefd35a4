"""The search ranking benchmarks' parts: the evaluation set and its vectors
(shared by ``ranking_bench`` and ``ranking_eval``), ``ranking_bench``'s full
text, old fusion and section (``fulltext``, ``fusion``, ``fusion_report``),
``ranking_eval``'s hybrid evaluation and section (``hybrid``,
``hybrid_report``)."""
