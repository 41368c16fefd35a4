"""The search ranking benchmark's parts: the evaluation set and its vectors
(``evalset``, ``vectors``; shared with ``trust_bench``), ``ranking_eval``'s
hybrid evaluation, its forms and its section (``hybrid``, ``forms``,
``hybrid_report``)."""
