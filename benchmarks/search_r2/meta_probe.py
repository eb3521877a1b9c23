"""What a model's representation says about flawed transcripts, before and after a meta warm
start: is "flawed" there to be read, and does a content-free cue separate the labels as well?

    python benchmarks/search_r2/meta_probe.py --model runs/sft/model --world W --index W_BM25 \
        --run runs/meta_phase --synthetic 300 --out runs/meta_probe

For labelled transcripts (corrupted references of the world's train and test splits, and,
with `--run`, the own rollouts a `searchrl sft ... meta_rollouts=N` run kept with their oracle
labels), one bf16 forward each (no training) gives:

- `probe`: a logistic regression (scikit-learn) on the last layer's hidden state at the meta
  prompt's final position, where the answer is read: fitted on the train transcripts, ROC-AUC
  on the held-out ones. High here and low for the refiner's own score means the information
  is present and the meta phase did not learn to read it out;
- `refiner`: the Meta-Refiner's calibrated log-odds as `searchrl sft` reports them;
- `surprise`: the largest negative log-likelihood of any policy token under the model, read
  on the trajectory itself (a misread entity is unlikely next to the passage that names the
  right one); its argmax step is a trimmer;
- `steps` and `no answer`: the step count and "never answered", the cues a reader needs no
  content for.

A table per held-out set goes to stdout and `OUT/probe.md`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from searchrl.config.model import ModelConfig
from searchrl.config.refiner import RefinerConfig
from searchrl.config.rollout import RolloutConfig
from searchrl.config.sft import SFTConfig
from searchrl.config.train import DataConfig, PolicyConfig
from searchrl.models.precision import fast_bf16
from searchrl.refiner.labelled import roc_auc
from searchrl.refiner.refiner import MetaRefiner
from searchrl.refiner.steps import meta_prompt, split_steps
from searchrl.rollout.parse import parse_action
from searchrl.train.environment import build_environment, load_policy
from searchrl.train.meta_sft import labelled_references, saved_rollouts
from searchrl.train.sft import reference_trajectory
from searchrl.types import Trajectory
from searchrl.utils.progress import progress_bar

Labelled = list[tuple[Trajectory, int]]


@torch.no_grad()
def features(
    model: torch.nn.Module, tokenizer: object, traj: Trajectory
) -> tuple[list[float], list[float]]:
    """(final-position hidden state of the meta prompt, per-step max policy-token NLL)."""
    steps = split_steps(traj.segments)
    _, ids = meta_prompt(tokenizer, traj.question, steps)
    out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    hidden = out.hidden_states[-1][0, -1].float().tolist()
    seq = list(traj.prompt_ids)
    owner: list[int] = []  # step index (1-based) of each policy token, 0 elsewhere
    step = 0
    for segment in traj.segments:
        step += segment.role == "policy"
        seq += segment.token_ids
        owner += [step if segment.role == "policy" else 0] * len(segment.token_ids)
    logits = model(input_ids=torch.tensor([seq])).logits[0, len(traj.prompt_ids) - 1 : -1].float()
    nll = -torch.log_softmax(logits, -1).gather(
        -1, torch.tensor(seq[len(traj.prompt_ids) :])[:, None]
    )
    per_step = [0.0] * len(steps)
    for value, who in zip(nll[:, 0].tolist(), owner, strict=True):
        if who:
            per_step[who - 1] = max(per_step[who - 1], value)
    return hidden, per_step


def answered(traj: Trajectory) -> bool:
    """Whether the last policy turn is an answer action."""
    steps = split_steps(traj.segments)
    return bool(steps) and parse_action(steps[-1].policy.text).kind == "answer"


def table(name: str, held: Labelled, feats: list, readings: list, probe: object) -> list[str]:
    """One held-out set's AUCs and trimmer exact steps."""
    labels = [y for _, y in held]
    positive = [y > 0 for y in labels]
    flawed = [i for i, y in enumerate(labels) if y > 0]

    def exact(pick: list[int]) -> float:
        return sum(pick[i] == labels[i] for i in flawed) / max(len(flawed), 1)

    surprise = [max(s) for _, s in feats]
    surprise_cut = [1 + max(range(len(s)), key=s.__getitem__) for _, s in feats]
    cues = {
        "probe (logistic, last layer)": (
            probe.predict_proba([h for h, _ in feats])[:, 1].tolist(),
            None,
        ),
        "refiner (calibrated log-odds)": (
            [r.score for r in readings],
            exact([r.cut(None) for r in readings]),
        ),
        "surprise (max token NLL)": (surprise, exact(surprise_cut)),
        "steps": ([float(len(s)) for _, s in feats], exact([len(s) for _, s in feats])),
        "no answer": ([float(not answered(t)) for t, _ in held], None),
    }
    lines = [
        f"### {name}: {len(held)} transcripts, flawed share {sum(positive) / len(held):.2f}",
        "",
        "| cue | ROC-AUC | trimmer exact step |",
        "|---|---:|---:|",
    ]
    for cue, (scores, hit) in cues.items():
        shown = "–" if hit is None else f"{hit:.2f}"
        lines.append(f"| {cue} | {roc_auc(scores, positive):.3f} | {shown} |")
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--world", required=True)
    parser.add_argument("--index", required=True)
    parser.add_argument("--run", type=Path, help="a `searchrl sft` run with own rollouts")
    parser.add_argument("--synthetic", type=int, default=300, help="corrupted references per split")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    env = build_environment(DataConfig(world_dir=args.world, index_dir=args.index), args.out)
    model, tokenizer = load_policy(ModelConfig(name_or_path=args.model), PolicyConfig())
    model.eval()
    chat = RolloutConfig().use_chat_template

    def synthetic(split: str, seed: int) -> Labelled:
        pairs = labelled_references(
            env.references(split), env.questions(split), args.synthetic, 0.5, seed, env.retriever
        )
        return [(reference_trajectory(r, tokenizer, chat), y) for r, y in pairs]

    sets = {"synthetic train": synthetic("train", 0), "synthetic held-out": synthetic("test", 1)}
    if args.run:
        data = DataConfig(world_dir=args.world, index_dir=args.index)
        sets["own train"], sets["own held-out"] = saved_rollouts(
            [args.run], env, SFTConfig(data=data)
        )
    feats: dict[str, list] = {}
    amp = torch.autocast("cpu", dtype=torch.bfloat16, enabled=fast_bf16(torch.device("cpu")))
    with amp, progress_bar("forwards", sum(map(len, sets.values())), unit="transcripts") as advance:
        for name, pairs in sets.items():
            feats[name] = []
            for traj, _ in pairs:
                feats[name].append(features(model, tokenizer, traj))
                advance(1)
    train = [n for n in sets if n.endswith("train")]
    probe = make_pipeline(StandardScaler(), LogisticRegression(C=0.05, max_iter=2000))
    probe.fit([h for n in train for h, _ in feats[n]], [y > 0 for n in train for _, y in sets[n]])
    refiner = MetaRefiner(
        model,
        tokenizer,
        None,
        env.retriever,
        RolloutConfig(),
        RefinerConfig(),
        int(tokenizer.pad_token_id),
    )
    lines = [f"# Meta probe of {args.model}", ""]
    for name in (n for n in sets if n.endswith("held-out")):
        with amp:
            readings = refiner.read([t for t, _ in sets[name]])
        lines += table(name, sets[name], feats[name], readings, probe)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "probe.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
