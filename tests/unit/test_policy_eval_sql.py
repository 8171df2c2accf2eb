"""The held-out audit sql/heldout_overlap.sql on hand-made rows in in-memory DuckDB: held-out policy-evaluation
prompts must never be anchor prompts or prompts the policy was trained on."""

import duckdb

from dr_core.store import sql
from dr_core.store.schemas import TABLES, conform


def _con(**tables):
    con = duckdb.connect()
    for name in TABLES:
        con.register(name, conform(name, tables.get(name, [])))
    return con


def test_heldout_overlap_finds_anchor_and_sampled_prompts_only():
    held = [
        {"dataset": "heldout-x", "prompt_id": "h1", "prompt": "What is  2+2?"},
        {"dataset": "heldout-x", "prompt_id": "h2", "prompt": "Write a poem"},
        {"dataset": "heldout-x", "prompt_id": "h3", "prompt": "Never seen"},
    ]
    train_prompts = [
        {"dataset": "train", "prompt_id": "t1", "prompt": "write a POEM "},
        {"dataset": "other", "prompt_id": "o1", "prompt": "Never seen"},
    ]  # not sampled: not training
    anchors = [
        {"dataset": "alpaca", "prompt_id": "a9", "prompt": "what is 2+2?", "rank": r, "response": "4", "source": "s"}
        for r in (1, 2)
    ]
    samples = [
        {
            "run_id": "r",
            "round": 1,
            "stage": "policy",
            "set_id": 0,
            "prompt_id": "t1",
            "response_idx": 0,
            "policy_ckpt": "p",
            "response": "...",
        }
    ]
    con = _con(prompts=held + train_prompts, anchors=anchors, samples=samples)
    rows = sql.run(con, "heldout_overlap", {"heldout": "heldout-x"}).to_pylist()
    assert [(r["heldout_prompt_id"], r["source"], r["prompt_id"]) for r in rows] == [
        ("h1", "anchors", "a9"),
        ("h2", "samples", "t1"),
    ]


def test_heldout_overlap_is_empty_for_the_bundled_slice_against_the_bundled_anchors():
    from dr_core.datasets import load
    from dr_core.paths import bundled

    held = [
        {"dataset": "h", "prompt_id": r.id, "prompt": r.prompt}
        for r in load(bundled("policy_eval_arenahard.jsonl"), "policy_eval")
    ]
    anchors = [
        {"dataset": "a", "prompt_id": r.id, "prompt": r.prompt, "rank": 1, "response": r.responses[0], "source": ""}
        for r in load(bundled("anchors_alpacaeval.jsonl"), "ranked")
    ]
    assert sql.run(_con(prompts=held, anchors=anchors), "heldout_overlap", {"heldout": "h"}).num_rows == 0


def test_split_overlap_finds_shared_text_and_ids_between_two_splits_only():
    rows = [
        {"dataset": "train", "prompt_id": "t1", "prompt": "Write a POEM "},
        {"dataset": "train", "prompt_id": "t2", "prompt": "Sum 2 and 2"},
        {"dataset": "held", "prompt_id": "h1", "prompt": "write a  poem"},
        {"dataset": "held", "prompt_id": "t2", "prompt": "Something else"},
        {"dataset": "held", "prompt_id": "h3", "prompt": "Never seen"},
        {"dataset": "other", "prompt_id": "o1", "prompt": "Never seen"},
    ]
    out = sql.run(_con(prompts=rows), "split_overlap", {"heldout": "held", "train": "train"}).to_pylist()
    assert [(r["heldout_prompt_id"], r["train_prompt_id"], r["match"]) for r in out] == [
        ("h1", "t1", "text"),
        ("t2", "t2", "id"),
    ]
    assert (
        sql.run(_con(prompts=rows[:2] + rows[4:5]), "split_overlap", {"heldout": "held", "train": "train"}).num_rows
        == 0
    )
