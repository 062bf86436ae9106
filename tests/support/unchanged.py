"""Hugging Face's own example scripts, run as they are: the inputs they need, built offline, and their arguments.

tests/fixtures/unchanged/huggingface/ holds ``run_clm.py`` (the Trainer) and ``run_clm_no_trainer.py`` (Accelerate)
byte for byte as Hugging Face wrote them (tests/fixtures/unchanged/SOURCES.md says where from; :data:`SHA256` pins
them). The stop-and-resume tests run them under torchrun or cloudddp and need, with no network at all:

- a text corpus (:func:`write_corpus`: distinct lines of words from a fixed list, drawn with a seeded RNG),
- a tokenizer folder that ``--tokenizer_name`` loads (:func:`write_tokenizer`: a word-level ``tokenizers`` model
  wrapped in ``PreTrainedTokenizerFast``),
- a tiny GPT-2 config folder for ``--config_name`` (:func:`write_config`: ``run_clm_no_trainer.py`` has no
  ``--config_overrides``, and its ``--model_type gpt2`` alone is the 124M-parameter default),
- an empty ``HF_HOME`` and the offline switches (:func:`offline_env`),
- for ``run_clm_no_trainer.py`` only, a ``sitecustomize`` that gives Accelerate back ``DistributedType.TPU``
  (:func:`no_trainer_env`): the script still reads it (its newest copy here, 2026-06) and Accelerate 1.16 no longer
  has it, so unaided the script dies with ``AttributeError: TPU`` right after ``accelerator.prepare``,
- the arguments for a tiny GPT-2 trained from scratch (:func:`run_clm_args`, :func:`run_clm_no_trainer_args`).

Sized so that at world size 2 one epoch is about 90 optimizer steps (about 45 at world size 4) of a few tens of
milliseconds each on a 2-core machine::

    inputs = clm_inputs(tmp_path)
    env = offline_env(inputs)
    cmd = [TORCHRUN, "--nproc-per-node", "2", str(RUN_CLM), *run_clm_args(inputs, str(tmp_path / "out"), epochs=1)]
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "unchanged" / "huggingface"
RUN_CLM = HERE / "run_clm.py"
RUN_CLM_NO_TRAINER = HERE / "run_clm_no_trainer.py"
SHA256 = {
    RUN_CLM: "d55f4705f486c6a0b6d2aeb15367129efef1162b84cc60f5cbdb73ec32d4d727",
    RUN_CLM_NO_TRAINER: "cd1407c4fbefc53865cdbda5a59dca8bfceba95f54d4d78d06b4f7c5863bb001",
}
"""Each script's sha256, as tests/fixtures/unchanged/SOURCES.md records it."""
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))

_WORD_LIST = (
    "apple bridge candle dragon eagle forest garden harbor island jungle kettle lantern meadow needle orange "
    "pepper quartz river saddle timber umbrella valley walnut yellow zephyr anchor basket castle desert ember "
    "feather glacier hammer ivory jacket kernel ladder marble nickel oyster pillow quiver rocket silver tunnel "
    "velvet window yonder zipper amber beacon cobalt dune falcon granite hollow indigo jasmine kiln lemon mango "
    "nectar orbit prism"
)
WORDS = tuple(_WORD_LIST.split())
"""The corpus's words, one token each (64)."""
SPECIALS = ("<unk>", "<bos>", "<eos>", "<pad>")
"""The tokenizer's special tokens, ids 0-3, ahead of :data:`WORDS` (``<pad>`` only holds its id)."""
VOCAB_SIZE = len(SPECIALS) + len(WORDS)
LINES = 4000
"""Corpus lines: 8-16 words each, ~48k tokens, of which run_clm's 95% train split is ~1,425 blocks of 32."""
BLOCK_SIZE = 32
BATCH_SIZE = 8
MODEL = {
    "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 64, "vocab_size": VOCAB_SIZE,
    "bos_token_id": 1, "eos_token_id": 2, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
}  # fmt: skip
"""The GPT-2 both scripts train: ~16k parameters, the tokenizer's vocabulary, no dropout."""
MODEL_OVERRIDES = ",".join(f"{key}={value}" for key, value in MODEL.items())
""":data:`MODEL` as ``run_clm.py``'s ``--config_overrides``."""
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
TPU_ALIAS = '''"""Written by tests/support/unchanged.py: ``DistributedType.TPU`` back on Accelerate (= ``XLA``).

run_clm_no_trainer.py checks ``accelerator.distributed_type == DistributedType.TPU``; Accelerate 1.16 dropped the
deprecated name, so the unchanged script needs it back. Lazy: it patches accelerate.utils.dataclasses as that module
loads, so processes that never import Accelerate (torchrun's agent) pay nothing.
"""

import importlib.abc
import importlib.machinery
import sys


class _TPUAlias(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "accelerate.utils.dataclasses":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_alias(module):
            exec_module(module)
            kind = module.DistributedType
            if "TPU" not in kind.__dict__ and "XLA" in kind.__members__:
                kind.TPU = kind.XLA

        spec.loader.exec_module = exec_and_alias
        return spec


sys.meta_path.insert(0, _TPUAlias())
'''
"""``sitecustomize.py`` for :func:`no_trainer_env`: ``DistributedType.TPU`` as an alias of ``XLA`` (not a member:
``MULTI_CPU == TPU`` stays false, as the script means it on a CPU)."""


@dataclass(frozen=True)
class ClmInputs:
    """What the scripts read: the corpus file, the tokenizer and model-config folders, the ``HF_HOME`` they cache in
    and the folder of :data:`TPU_ALIAS`'s ``sitecustomize.py``."""

    corpus: Path
    tokenizer: Path
    config: Path
    hf_home: Path
    site: Path


def corpus_lines(count: int = LINES, *, seed: int = 0) -> list[str]:
    """``count`` distinct lines of 8-16 words from :data:`WORDS`, the same for the same ``seed``.

    Each word is followed by one of three words fixed for it (a Markov chain drawn from ``seed``), so the model has
    something to learn: the loss falls from ~4.2 (ln 68) towards ~1.1 (ln 3), and a resumed run's curve can be told
    from a restarted one's."""
    rng = random.Random(seed)
    successors = {word: rng.sample(WORDS, 3) for word in WORDS}
    lines: dict[str, None] = {}
    while len(lines) < count:
        words = [rng.choice(WORDS)]
        for _ in range(rng.randint(8, 16) - 1):
            words.append(rng.choice(successors[words[-1]]))
        lines.setdefault(" ".join(words))
    return list(lines)


def write_corpus(path: Path, count: int = LINES, *, seed: int = 0) -> Path:
    """:func:`corpus_lines` written to ``path`` (a ``.txt``: the scripts choose their loader by the suffix)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in corpus_lines(count, seed=seed)), encoding="utf-8")
    return path


def write_tokenizer(folder: Path) -> Path:
    """A word-level tokenizer over :data:`WORDS` saved to ``folder``, which ``AutoTokenizer.from_pretrained``
    (``--tokenizer_name``) loads offline; ``folder``."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate((*SPECIALS, *WORDS))}
    model = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    model.pre_tokenizer = WhitespaceSplit()
    # No pad token: every block is BLOCK_SIZE long, and one the model's config lacks has the Trainer rewrite the
    # config (with a warning).
    unk, bos, eos, _pad = SPECIALS
    fast = PreTrainedTokenizerFast(
        tokenizer_object=model, unk_token=unk, bos_token=bos, eos_token=eos, model_max_length=MODEL["n_positions"]
    )
    folder.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(folder))
    return folder


def write_config(folder: Path) -> Path:
    """:data:`MODEL` saved as a GPT-2 ``config.json`` in ``folder``, for ``--config_name``; ``folder``."""
    from transformers import GPT2Config

    folder.mkdir(parents=True, exist_ok=True)
    GPT2Config(**MODEL).save_pretrained(str(folder))
    return folder


def clm_inputs(root: Path, *, lines: int = LINES, seed: int = 0) -> ClmInputs:
    """The corpus, the tokenizer, the model config and an empty ``HF_HOME`` under ``root`` (built once: a second
    call reuses them)."""
    inputs = ClmInputs(
        root / "corpus" / "train.txt", root / "tokenizer", root / "gpt2-tiny", root / "hf_home", root / "site"
    )
    if not inputs.corpus.is_file():
        write_corpus(inputs.corpus, lines, seed=seed)
    if not (inputs.tokenizer / "tokenizer.json").is_file():
        write_tokenizer(inputs.tokenizer)
    if not (inputs.config / "config.json").is_file():
        write_config(inputs.config)
    inputs.hf_home.mkdir(parents=True, exist_ok=True)
    inputs.site.mkdir(parents=True, exist_ok=True)
    (inputs.site / "sitecustomize.py").write_text(TPU_ALIAS, encoding="utf-8")
    return inputs


def offline_env(inputs: ClmInputs, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) with the Hub switched off, ``HF_HOME`` in ``inputs``, Accelerate on the CPU
    and no telemetry or tokenizer threads: what both scripts need to run here without a network."""
    env = dict(os.environ if base is None else base)
    env.update(OFFLINE)
    env.update(
        HF_HOME=str(inputs.hf_home),
        HF_HUB_DISABLE_TELEMETRY="1",
        ACCELERATE_USE_CPU="true",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
    )
    return env


def no_trainer_env(inputs: ClmInputs, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """:func:`offline_env` with ``inputs.site`` ahead on ``PYTHONPATH``, so that :data:`TPU_ALIAS` runs in every
    process: what ``run_clm_no_trainer.py`` needs on Accelerate 1.16 (its bytes stay as they are). A
    ``sitecustomize`` already on the path (a distribution's own) is shadowed; this venv has none."""
    env = offline_env(inputs, base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(inputs.site), env.get("PYTHONPATH", "")]))
    return env


def run_clm_args(
    inputs: ClmInputs,
    output_dir: str,
    *,
    epochs: int,
    save_steps: int = 100_000,
    logging_steps: int = 1,
    resume_from_checkpoint: str | None = None,
) -> list[str]:
    """``run_clm.py``'s arguments: a tiny GPT-2 from scratch on ``inputs`` for ``epochs`` epochs, a Trainer
    checkpoint every ``save_steps`` steps (by default none before the end) and a log record every ``logging_steps``.
    """
    args = [
        "--model_type", "gpt2",
        "--config_overrides", MODEL_OVERRIDES,
        "--tokenizer_name", str(inputs.tokenizer),
        "--train_file", str(inputs.corpus),
        "--block_size", str(BLOCK_SIZE),
        "--do_train",
        "--per_device_train_batch_size", str(BATCH_SIZE),
        "--num_train_epochs", str(epochs),
        "--learning_rate", "1e-3",
        "--output_dir", output_dir,
        "--save_strategy", "steps",
        "--save_steps", str(save_steps),
        "--logging_steps", str(logging_steps),
        "--seed", "0",
        "--report_to", "none",
        "--use_cpu",
        "--dataloader_num_workers", "0",
        "--ddp_find_unused_parameters", "false",
        "--disable_tqdm", "true",
    ]  # fmt: skip
    if resume_from_checkpoint is not None:
        args += ["--resume_from_checkpoint", resume_from_checkpoint]
    return args


def run_clm_no_trainer_args(
    inputs: ClmInputs,
    output_dir: str,
    *,
    epochs: int,
    checkpointing_steps: int | str | None = None,
    resume_from_checkpoint: str | None = None,
) -> list[str]:
    """``run_clm_no_trainer.py``'s arguments: the same model and data as :func:`run_clm_args`; Accelerate saves its
    state to ``<output_dir>/step_<n>`` every ``checkpointing_steps`` steps (``"epoch"``: ``epoch_<i>``), and
    ``resume_from_checkpoint`` (one of those folders) resumes from it."""
    args = [
        "--config_name", str(inputs.config),
        "--tokenizer_name", str(inputs.tokenizer),
        "--train_file", str(inputs.corpus),
        "--block_size", str(BLOCK_SIZE),
        "--per_device_train_batch_size", str(BATCH_SIZE),
        "--per_device_eval_batch_size", str(BATCH_SIZE),
        "--num_train_epochs", str(epochs),
        "--learning_rate", "1e-3",
        "--output_dir", output_dir,
        "--seed", "0",
    ]  # fmt: skip
    if checkpointing_steps is not None:
        args += ["--checkpointing_steps", str(checkpointing_steps)]
    if resume_from_checkpoint is not None:
        args += ["--resume_from_checkpoint", resume_from_checkpoint]
    return args


def unchanged(script: Path) -> bool:
    """``script`` is there and byte for byte the copy :data:`SHA256` records."""
    return script.is_file() and hashlib.sha256(script.read_bytes()).hexdigest() == SHA256[script]
