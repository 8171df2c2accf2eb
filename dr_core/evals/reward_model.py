"""Scalar reward model baseline for the evaluator side (paper Table 1-2 rows "Skywork-27B", "Nemotron-70B", and
their "w/ responses" variants): any local Hugging Face sequence-classification checkpoint with one output
(``AutoModelForSequenceClassification``, ``num_labels=1``) scores each candidate on its own; with
``with_responses`` the user turn also lists the whole candidate set (``prompts.reward_model_messages``).

The scores go through the same strict metrics as the rubric evaluator (``dr_core.scoring.metrics``): pairwise accuracy,
strict top-1, ties, nDCG. torch/transformers are imported lazily, here only.

    dr eval-evaluator data.jsonl --format pairwise --mode reward-model --reward-model /models/Skywork-Reward-V2 \\
        [--with-responses] --output metrics.json
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

from dr_core.errors import DRError
from dr_core.evaluator.items import EvalItem
from dr_core.rubric import prompts
from dr_core.scoring.metrics import score_list_metrics

Log = Callable[[str], None]


class RewardModelError(DRError, ValueError):
    """A directory that is not a usable scalar reward model (the message says why)."""


def check_checkpoint(path: str | Path) -> None:
    """RewardModelError unless ``path`` is a Hugging Face checkpoint directory (before torch is imported)."""
    if not (Path(path).expanduser() / "config.json").is_file():
        raise RewardModelError(f"{path}: not a Hugging Face checkpoint directory (no config.json)")


class RewardModel:
    """A loaded scalar reward model: ``score(messages_list) -> list[float]`` (one float per conversation)."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_length: int = 4096,
        batch_size: int = 4,
        device: str | None = None,
        dtype: str = "float32",
    ):
        path = Path(path).expanduser()
        check_checkpoint(path)
        import torch
        from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

        config = AutoConfig.from_pretrained(path)
        if getattr(config, "num_labels", None) != 1:
            raise RewardModelError(f"{path}: num_labels={config.num_labels}; a scalar reward model has exactly 1")
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForSequenceClassification.from_pretrained(path, dtype=getattr(torch, dtype)).to(
            self.device
        )
        self.model.eval()
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.model.config.pad_token_id is None:
            # the classifier reads the last non-pad token: it must know which id is padding
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.tokenizer.padding_side = "right"
        self.max_length, self.batch_size = max_length, batch_size
        self.model_name = str(path)

    def _text(self, messages: list[dict]) -> str:
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template(messages, tokenize=False)
        return "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages)

    def score(self, conversations: Sequence[list[dict]]) -> list[float]:
        """One scalar per conversation (user turn + the scored assistant turn), in batches, truncated to
        ``max_length`` tokens."""
        import torch

        out: list[float] = []
        for i in range(0, len(conversations), self.batch_size):
            texts = [self._text(c) for c in conversations[i : i + self.batch_size]]
            enc = self.tokenizer(
                texts,
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=self.max_length,
                add_special_tokens=False,
            ).to(self.device)
            with torch.no_grad():
                logits = self.model(**enc).logits
            out.extend(float(x) for x in logits[:, 0].float().cpu())
        return out


def score_items(rm: RewardModel, items: Sequence[EvalItem], *, with_responses: bool = False) -> list[list[float]]:
    """Scores (n_items, n_candidates): each candidate alone, or with the whole candidate set in the user turn."""
    convs, shape = [], []
    for it in items:
        shape.append(len(it.candidates))
        convs += [
            prompts.reward_model_messages(it.prompt, c, it.candidates if with_responses else None)
            for c in it.candidates
        ]
    flat = rm.score(convs)
    out, k = [], 0
    for n in shape:
        out.append(flat[k : k + n])
        k += n
    return out


def score_metrics(fmt: str, scores: Sequence[Sequence[float]], relevance: Sequence[Sequence[float]]) -> dict:
    """Strict accuracy, ties and (lists) nDCG of score lists whose candidate 0 is the annotated best
    (``dr_core.scoring.metrics.score_list_metrics``; a reward model always scores, so nothing is unscorable). Pure."""
    m = score_list_metrics(fmt, scores, relevance)
    metrics = {
        "n": len(scores),
        "format": fmt,
        "accuracy": m["accuracy"],
        "chance_accuracy": m["chance_accuracy"],
        "ties": m["ties"],
        "unscorable": 0.0,
    }
    if fmt != "pairwise":
        metrics["ndcg"] = m["ndcg"]
    return metrics


def run_eval_reward_model(
    path: str | Path,
    fmt: str,
    *,
    reward_model: str | Path,
    with_responses: bool = False,
    limit: int | None = None,
    max_length: int = 4096,
    batch_size: int = 4,
    log: Log = lambda _m: None,
) -> dict:
    """``dr eval-evaluator --mode reward-model``: validate the data, load the model, score, return the metrics."""
    from dr_core.evals.evaluate import eval_items

    _rows, items, relevance = eval_items(path, fmt, limit)  # validates the whole file before any model work
    check_checkpoint(reward_model)
    t0 = time.perf_counter()
    rm = RewardModel(reward_model, max_length=max_length, batch_size=batch_size)
    startup = time.perf_counter() - t0
    log(
        f"scoring {sum(len(i.candidates) for i in items)} candidates with {reward_model}"
        f"{' (with the response set)' if with_responses else ''}"
    )
    t1 = time.perf_counter()
    scores = score_items(rm, items, with_responses=with_responses)
    metrics = score_metrics(fmt, scores, relevance)
    metrics.update(
        {
            "mode": "reward-model-with-responses" if with_responses else "reward-model",
            "input": str(path),
            "limit": limit,
            "models": {"reward_model": rm.model_name},
            "seconds": time.perf_counter() - t1,
            "costs": {"startup": {"seconds": startup}},
            "scores": scores,
        }
    )
    return metrics
