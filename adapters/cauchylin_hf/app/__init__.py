"""The application on top of the library: the command line, the embedded demo and their helpers.

Nothing in the library (:mod:`cauchylin_hf` outside this subpackage) imports it.

* :mod:`cauchylin_hf.app.cli` — the ``cauchylin-lm`` command line (``demo``, ``train``,
  ``evaluate``, ``predict``, ``generate``, ``verify``);
* :mod:`cauchylin_hf.app.parser`, :mod:`cauchylin_hf.app.console` — the arguments of every
  command (declared once) and one run of the command line: parse, check, run, an exit status;
* :mod:`cauchylin_hf.app.checks` — the checks of the command line's arguments, folders and
  files that need no model (run before torch and transformers are imported: the standard
  library and NumPy);
* :mod:`cauchylin_hf.app.inputs`, :mod:`cauchylin_hf.app.reports` — what the commands read (data,
  prompts, the model) and what they print about the numbers;
* :mod:`cauchylin_hf.app.scratch` — a model from nothing: a tokenizer trained on the data and a
  random backbone from a preset or a ``config.json``;
* :mod:`cauchylin_hf.app.demo` — the embedded demo that ``cauchylin-lm demo`` runs;
* :mod:`cauchylin_hf.app.corpus` — the synthetic numeric corpus and its byte-level BPE tokenizer.
"""
