"""The application on top of the library: the command line, the embedded demo and its corpus.

Nothing in the library (:mod:`cauchylin_hf` outside this subpackage) imports it.

* :mod:`cauchylin_hf.app.cli` — the ``cauchylin-lm`` command line (``demo``, ``train``,
  ``evaluate``, ``generate``, ``verify``);
* :mod:`cauchylin_hf.app.demo` — the embedded demo that ``cauchylin-lm demo`` runs;
* :mod:`cauchylin_hf.app.corpus` — the synthetic numeric corpus and its byte-level BPE tokenizer.
"""
