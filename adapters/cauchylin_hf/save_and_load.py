"""Saving and loading the causal model: full folders (atomic, checked) and heads-only folders.

:class:`CheckpointMixin` gives :class:`~cauchylin_hf.model.CauchyLMForCausalLM` its file methods,
as PEFT keeps saving and loading apart from its models: ``save_pretrained`` writes atomically
(:mod:`cauchylin_hf.atomic_save`), ``from_pretrained`` refuses a missing local folder at once and
corrupt head tensors, and ``save_heads``/``from_heads`` read and write the heads-only format
(:mod:`cauchylin_hf.heads_io`, :func:`cauchylin_hf.attach.from_heads`).
"""

from __future__ import annotations

import os
import re
from typing import Any, cast

from transformers import PreTrainedModel

from cauchylin.nn.readouts import ContextReadouts

from . import attach, heads_io
from ._backbone import check_finite_weights, check_loaded_weights
from .atomic_save import staged_folder
from .heads_io import HEADS_CONFIG_NAME, HEADS_WEIGHTS_NAME, check_head_tensors, head_tensors
from .hf_compat import CONFIG_ERRORS, progress_bars
from .tokenizer import NUMERIC_TOKENIZER_CONFIG

__all__ = ["CheckpointMixin", "is_checkpoint_file"]

_CHECKPOINT_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "training_args.bin",
        "adapter_config.json",
        HEADS_CONFIG_NAME,
        HEADS_WEIGHTS_NAME,
        NUMERIC_TOKENIZER_CONFIG,
        # the files transformers' tokenizers save (fast, slow, sentencepiece, chat template)
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "vocab.txt",
        "merges.txt",
        "tokenizer.model",
        "spiece.model",
        "sentencepiece.bpe.model",
        "chat_template.jinja",
        "chat_template.json",
    }
)


# model.safetensors, model-00001-of-00002.safetensors, model.fp16.safetensors, pytorch_model.bin,
# adapter_model.safetensors and the shards' indexes (model.safetensors.index.json, with a variant)
_WEIGHTS = re.compile(
    r"(?:model|pytorch_model|adapter_model)(?:\.\w+)?(?:-\d+-of-\d+)?\.(?:safetensors|bin)"
    r"|(?:model|pytorch_model)\.(?:safetensors|bin)\.index(?:\.\w+)?\.json"
)


def _is_weights_file(name: str) -> bool:
    """Weight files of an earlier ``save_pretrained`` (single, sharded, indexed; any variant),
    by transformers' names (a ``model_backup.safetensors`` of a user's is not one)."""
    return _WEIGHTS.fullmatch(name) is not None


def is_checkpoint_file(name: str) -> bool:
    """Whether a file name is one that a saved model, its tokenizer or its heads are made of.

    What a model folder holds besides these (a user's notes, plots, subfolders) is not part of
    the checkpoint: replacing the model need not touch it.

    Args:
        name: a file name (no folder).

    Returns:
        True for weights (``model.safetensors``, shards and their index, ``pytorch_model.bin``,
        adapters), ``config.json``, ``generation_config.json``, ``training_args.bin``, the
        heads-only files and every file a transformers tokenizer or the numeric tokenizer saves.

    Example:
        >>> [is_checkpoint_file(n) for n in ("model-00001-of-00002.safetensors", "merges.txt")]
        [True, True]
        >>> is_checkpoint_file("notes.md"), is_checkpoint_file("model_backup.safetensors")
        (False, False)
    """
    return name in _CHECKPOINT_FILES or _is_weights_file(name)


class CheckpointMixin(PreTrainedModel):
    """File methods of the causal model (mixed into :class:`~cauchylin_hf.model.CauchyLMForCausalLM`).

    Example:
        >>> import tempfile
        >>> from cauchylin_hf import CauchyLMForCausalLM
        >>> from cauchylin_hf.testing import tiny_base_model
        >>> model = CauchyLMForCausalLM.from_base(tiny_base_model(), num_token_id=299)
        >>> folder = tempfile.mkdtemp()
        >>> model.save_pretrained(folder)
        >>> type(CauchyLMForCausalLM.from_pretrained(folder)).__name__
        'CauchyLMForCausalLM'
    """

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
        """``PreTrainedModel.from_pretrained``, checked, then the config's backbone freezing.

        Loading never re-initialises the heads: every head tensor found in the checkpoint is
        kept as saved, and a weight missing from the files gets the documented initialisation
        (see :meth:`_init_weights`; transformers' own for the backbone). A checkpoint is refused
        when none of the model's weights is in its files (they are another model's: a
        ``config.json`` that is not the one saved with them), when a weight is NaN or infinite
        (a corrupt checkpoint, or one saved from a training that diverged), and when
        ``config.json`` fails its own validation (huggingface_hub's ``StrictDataclassError``,
        raised as a ``ValueError``). A name that can only be a local folder (a path, or a single word:
        causal models on the Hub are ``owner/name``) and is not one fails at once instead of
        asking the Hub. Transformers' progress bar ("Loading weights") is hidden unless
        ``progress=True``.

        Args:
            *args: ``PreTrainedModel.from_pretrained`` arguments (the folder first).
            **kwargs: its keyword arguments (``dtype``, ``device_map``, ...), and ``progress``
                (default False): show transformers' progress bars while loading.

        Returns:
            The model (or transformers' ``(model, loading_info)`` tuple with
            ``output_loading_info=True``).

        Raises:
            FileNotFoundError: a local folder name that does not exist.
            ValueError: files that hold none of the model's weights, a weight with NaN or
                infinite values, or a config that fails its validation.

        Example:
            >>> import tempfile
            >>> from cauchylin_hf import CauchyLMForCausalLM
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> folder = tempfile.mkdtemp()
            >>> CauchyLMForCausalLM.from_base(tiny_base_model(), num_token_id=299).save_pretrained(
            ...     folder
            ... )
            >>> CauchyLMForCausalLM.from_pretrained(folder).config.num_token_id
            299
            >>> CauchyLMForCausalLM.from_pretrained("flat-modle")
            Traceback (most recent call last):
            ...
            FileNotFoundError: no model folder 'flat-modle' (and it is not a Hub id, which has the form owner/name)
        """
        name = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        if isinstance(name, (str, os.PathLike)) and not os.path.isdir(name):
            text = os.fspath(name)
            local = isinstance(name, os.PathLike) or os.path.isabs(text) or "/" not in text
            if local or text.startswith((".", "~")) or text.count("/") > 1:
                raise FileNotFoundError(
                    f"no model folder {text!r} (and it is not a Hub id, which has the form "
                    "owner/name)"
                )
        wanted = kwargs.pop("output_loading_info", False)
        progress = bool(kwargs.pop("progress", False))
        source = os.fspath(name) if isinstance(name, (str, os.PathLike)) else "checkpoint"
        try:
            with progress_bars(progress):
                loaded = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        except CONFIG_ERRORS as exc:  # a config value that fails its own validation
            first = str(exc).strip().splitlines()
            detail = " ".join(line.strip() for line in first[:2]) or type(exc).__name__
            raise ValueError(f"{source}: config.json is not a valid config: {detail}") from None
        model, info = cast(tuple[Any, dict[str, Any]], loaded)
        if isinstance(model, CheckpointMixin):
            for module in model.modules():
                if isinstance(module, ContextReadouts):  # saved as floats by earlier releases
                    module.integer_buffers()
            check_loaded_weights(source, model, info, partial=True)
            check_head_tensors(head_tensors(model), source)
            check_finite_weights(model.named_parameters(), source)
            cast(Any, model).set_backbone_trainable(not model.config.freeze_backbone)
        return (model, info) if wanted else model

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        """``PreTrainedModel.save_pretrained``, atomically: the folder holds the old model or the new.

        The files are written into a new folder beside ``save_directory``, which takes its place
        only when every file was written (:func:`cauchylin_hf.atomic_save.staged_folder`): a
        full disk, an error, Ctrl-C, SIGTERM or SIGKILL during the save leave the previous
        model loadable. Other files in the folder (a tokenizer) are kept; weight files of an
        earlier save that the new one does not write are not. With ``is_main_process=False``
        (the other ranks of a distributed save, which write nothing) the call goes straight to
        transformers. Transformers' progress bar ("Writing model shards") is hidden unless
        ``progress=True``.

        Args:
            save_directory: the folder (created if needed).
            *args: ``PreTrainedModel.save_pretrained``'s further arguments.
            **kwargs: its keyword arguments (``state_dict``, ``max_shard_size``, ``push_to_hub``,
                ...), and ``progress`` (default False): show transformers' progress bars.

        Raises:
            ValueError: ``save_directory`` is an existing file.
            OSError: the model could not be written (the folder is unchanged).

        Example:
            >>> import os, tempfile
            >>> from cauchylin_hf import CauchyLMForCausalLM
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> model = CauchyLMForCausalLM.from_base(tiny_base_model(), num_token_id=299)
            >>> folder = tempfile.mkdtemp()
            >>> model.save_pretrained(folder)
            >>> sorted(os.listdir(folder))
            ['config.json', 'generation_config.json', 'model.safetensors']
        """
        progress = bool(kwargs.pop("progress", False))
        is_main = args[0] if args else kwargs.get("is_main_process", True)
        with progress_bars(progress):
            if not is_main or kwargs.get("distributed_checkpoint"):
                super().save_pretrained(save_directory, *args, **kwargs)
                return
            if kwargs.get("push_to_hub"):
                # transformers names the Hub repository after the folder it is given.
                kwargs.setdefault("repo_id", os.path.basename(os.path.normpath(save_directory)))
            with staged_folder(save_directory, stale=_is_weights_file) as staging:
                super().save_pretrained(staging, *args, **kwargs)

    def save_heads(self, save_directory: str | os.PathLike) -> dict[str, int]:
        """Save only the new layers (plus ``<NUM>`` row changes and the base's name/path).

        See :func:`cauchylin_hf.heads_io.write_heads`.

        Args:
            save_directory: folder to write (created if needed).

        Returns:
            ``{file name: size in bytes}`` of the files written.

        Raises:
            ValueError: as :func:`~cauchylin_hf.heads_io.write_heads` (a PEFT-wrapped head, a
                file in the way).

        Example:
            >>> import tempfile
            >>> from cauchylin_hf import CauchyLMForCausalLM
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("qwen2"), num_token_id=299)
            >>> sizes = model.save_heads(tempfile.mkdtemp())
            >>> sorted(sizes), sizes["cauchy_heads.safetensors"] > 300 * 32 * 4  # W_cls in float32
            (['cauchy_heads.safetensors', 'cauchy_heads_config.json'], True)
        """
        return heads_io.write_heads(self, save_directory)

    @classmethod
    def from_heads(
        cls,
        heads_directory: str | os.PathLike,
        base: str | os.PathLike | PreTrainedModel | None = None,
        *,
        base_kwargs: dict[str, Any] | None = None,
        strict_base: bool = True,
    ) -> Any:
        """Load heads-only files on top of an unchanged base.

        See :func:`cauchylin_hf.attach.from_heads`.

        Args:
            heads_directory: a folder written by :meth:`save_heads`.
            base: the base (folder or loaded causal LM); default the recorded
                ``base_model_name_or_path``.
            base_kwargs: extra ``from_pretrained`` arguments for a base folder.
            strict_base: refuse a base whose weights differ from the saved base's (default);
                ``False`` loads anyway with a warning.

        Returns:
            The model in eval mode.

        Raises:
            ValueError: as :func:`~cauchylin_hf.attach.from_heads` (not a heads folder, a
                broken heads file, no base, a base that does not match).

        Example:
            >>> import tempfile, torch
            >>> from cauchylin_hf import CauchyLMForCausalLM
            >>> from cauchylin_hf.testing import tiny_base_model
            >>> model = CauchyLMForCausalLM.from_base(tiny_base_model("gpt2"), num_token_id=300)
            >>> folder = tempfile.mkdtemp()
            >>> _ = model.save_heads(folder)  # the added <NUM> row travels with the heads
            >>> again = CauchyLMForCausalLM.from_heads(folder, tiny_base_model("gpt2"))
            >>> ids = torch.tensor([[5, 300, 7]])
            >>> again.config.vocab_size, bool(torch.equal(again(ids).loc_S, model(ids).loc_S))
            (301, True)
        """
        return attach.from_heads(
            heads_directory, base, base_kwargs=base_kwargs, model_class=cls, strict_base=strict_base
        )
