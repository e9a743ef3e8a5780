#!/usr/bin/env python3
"""Validate a Harbor job directory with Harbor's own pydantic models: the files `harness batch`
writes for benchmark tasks, read by a real client of the format.

Usage (a Python >= 3.12 with `pip install harbor`; .ci/run makes one and exports it as
HARNESS_TEST_HARBOR_PYTHON for controller/tests/it/benchmarks.rs):
    python validate.py JOB_DIR [--strict]

Checks (E = error -> exit 1, W = warning -> exit 1 only with --strict):
  job level   config.json  -> harbor.models.job.config.JobConfig          (E)
              result.json  -> harbor.models.job.result.JobResult          (E)
              lock.json    -> harbor.models.job.lock.JobLock              (W if missing)
  per trial   (every sub-directory holding config.json or result.json)
              config.json  -> harbor.models.trial.config.TrialConfig      (E)
              result.json  -> harbor.models.trial.result.TrialResult      (E)
              lock.json    -> harbor.models.job.lock.TrialLock            (W if missing: `harbor upload`
                                                                           and the viewer's /api/source
                                                                           reads require it)
                              its task digest == harbor.publisher.packager.Packager
                              .compute_content_hash(task folder), for Harbor tasks  (W)
              agent/trajectory.json (and steps/*/agent/trajectory.json)
                           -> harbor.models.trajectories.Trajectory       (E if present and invalid)
                              + harbor.utils.trajectory_validator.TrajectoryValidator (media paths)
              verifier/reward.json | reward.txt parsed exactly like
                              harbor.verifier.verifier.Verifier does; compared with
                              result.verifier_result.rewards                (W on mismatch)
  consistency trial dir name == config.trial_name == result.trial_name  (W)
              JobResult.n_total_trials vs number of trials              (W)
              JobStats recomputed with JobStats.from_trial_results, metrics recomputed
              with harbor.metrics.mean.Mean, pass@k with harbor.utils.pass_at_k  (W)
Prints one line per validated file.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from collections import defaultdict
from pathlib import Path

warnings.simplefilter("ignore")

from pydantic import ValidationError  # noqa: E402

from harbor.metrics.mean import Mean  # noqa: E402
from harbor.models.job.config import JobConfig  # noqa: E402
from harbor.models.job.lock import JobLock, TrialLock  # noqa: E402
from harbor.models.job.result import JobResult, JobStats  # noqa: E402
from harbor.models.trajectories import Trajectory  # noqa: E402
from harbor.models.trial.config import TrialConfig  # noqa: E402
from harbor.models.trial.result import TrialResult  # noqa: E402
from harbor.publisher.packager import Packager  # noqa: E402
from harbor.utils.pass_at_k import compute_pass_at_k_by_evals  # noqa: E402
from harbor.utils.trajectory_validator import TrajectoryValidator  # noqa: E402

errors: list[str] = []
warns: list[str] = []


def ok(msg: str) -> None:
    print(f"OK    {msg}")


def err(msg: str) -> None:
    errors.append(msg)
    print(f"ERROR {msg}")


def warn(msg: str) -> None:
    warns.append(msg)
    print(f"WARN  {msg}")


def load(model, path: Path, required: bool = True, missing_is_warning: bool = False):
    if not path.exists():
        if required:
            (warn if missing_is_warning else err)(f"{path}: missing")
        return None
    try:
        obj = model.model_validate_json(path.read_text())
    except ValidationError as e:
        err(f"{path}: not a valid {model.__name__}:\n{e}")
        return None
    ok(f"{path} -> {model.__module__}.{model.__name__}")
    return obj


def parse_reward_files(verifier_dir: Path):
    """Exactly Harbor's precedence: reward.json wins over reward.txt."""
    rj, rt = verifier_dir / "reward.json", verifier_dir / "reward.txt"
    if rj.exists():
        if rj.stat().st_size == 0:
            return "RewardFileEmptyError", None
        try:
            rewards = json.loads(rj.read_text())
        except ValueError:
            return "VerifierOutputParseError", None
        values = rewards.values() if isinstance(rewards, dict) else [rewards]
        for v in values:
            if not isinstance(v, (int, float)):
                return "VerifierOutputParseError", None
            if isinstance(v, float) and not math.isfinite(v):
                return "VerifierOutputParseError", None
        return None, rewards
    if rt.exists():
        if rt.stat().st_size == 0:
            return "RewardFileEmptyError", None
        try:
            v = float(rt.read_text())
        except ValueError:
            return "VerifierOutputParseError", None
        if not math.isfinite(v):
            return "VerifierOutputParseError", None
        return None, {"reward": v}
    return "RewardFileNotFoundError", None


def check_trajectory(path: Path) -> None:
    if not path.exists():
        return
    try:
        traj = Trajectory.model_validate_json(path.read_text())
    except ValidationError as e:
        err(f"{path}: not a valid ATIF Trajectory:\n{e}")
        return
    v = TrajectoryValidator()
    if not v.validate(path):
        for e in v.errors:
            err(f"{path}: TrajectoryValidator: {e}")
        return
    ok(f"{path} -> harbor.models.trajectories.Trajectory ({traj.schema_version}, {len(traj.steps)} steps)")


def check_trial(trial_dir: Path) -> TrialResult | None:
    cfg = load(TrialConfig, trial_dir / "config.json")
    res = load(TrialResult, trial_dir / "result.json")
    lock = load(TrialLock, trial_dir / "lock.json", missing_is_warning=True)
    # A Harbor task's digest is Harbor's content hash of its folder.
    if lock is not None and lock.task.path is not None and (lock.task.path / "task.toml").is_file():
        want, _ = Packager.compute_content_hash(lock.task.path)
        if lock.task.digest != f"sha256:{want}":
            warn(f"{trial_dir}: lock digest {lock.task.digest} != Harbor's content hash sha256:{want}")
        else:
            ok(f"{trial_dir / 'lock.json'}: digest is Harbor's content hash of {lock.task.path}")
    for name in (cfg.trial_name if cfg else None, res.trial_name if res else None):
        if name is not None and name != trial_dir.name:
            warn(f"{trial_dir}: directory name != trial_name {name!r}")
    if res is not None and cfg is not None and res.config != cfg:
        warn(f"{trial_dir}: result.json 'config' differs from config.json (ignoring trial_name/job_id)")

    roots = [trial_dir]
    if (trial_dir / "steps").is_dir():
        roots += sorted(p for p in (trial_dir / "steps").iterdir() if p.is_dir())
    for root in roots:
        check_trajectory(root / "agent" / "trajectory.json")

    if res is not None and (trial_dir / "verifier").is_dir() and not res.step_results:
        problem, rewards = parse_reward_files(trial_dir / "verifier")
        stored = res.verifier_result.rewards if res.verifier_result else None
        if problem is None:
            ok(f"{trial_dir / 'verifier'}: reward file parses to {rewards}")
            if stored is not None and stored != rewards:
                warn(f"{trial_dir}: verifier_result.rewards {stored} != reward file {rewards}")
        elif stored is not None:
            warn(f"{trial_dir}: reward file problem {problem} but result has rewards {stored}")
        else:
            ok(f"{trial_dir / 'verifier'}: no usable reward file ({problem}); result has no rewards either")
    return res


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    strict = "--strict" in sys.argv
    if len(args) != 1:
        print(__doc__)
        return 2
    job_dir = Path(args[0])
    if not job_dir.is_dir():
        print(f"not a directory: {job_dir}")
        return 2

    load(JobConfig, job_dir / "config.json")
    job_result = load(JobResult, job_dir / "result.json")
    load(JobLock, job_dir / "lock.json", missing_is_warning=True)

    trials: list[TrialResult] = []
    for d in sorted(p for p in job_dir.iterdir() if p.is_dir()):
        if not ((d / "config.json").exists() or (d / "result.json").exists()):
            continue
        r = check_trial(d)
        if r is not None:
            trials.append(r)

    if job_result is not None:
        if job_result.n_total_trials != len(trials):
            warn(f"result.json n_total_trials={job_result.n_total_trials} but {len(trials)} trial results found")
        recomputed = JobStats.from_trial_results(trials)
        st = job_result.stats
        for field in ("n_completed_trials", "n_errored_trials"):
            if getattr(st, field) != getattr(recomputed, field):
                warn(f"stats.{field}={getattr(st, field)} but recomputed {getattr(recomputed, field)}")
        if set(st.evals) != set(recomputed.evals):
            warn(f"stats.evals keys {sorted(st.evals)} != recomputed {sorted(recomputed.evals)}")
        # metrics: Harbor's default metric is Mean over trials whose reward is valid
        rewards_by_key = defaultdict(list)
        for t in trials:
            if t.reward_valid and t.verifier_result is not None:
                key = JobStats.format_agent_evals_key(
                    t.agent_info.name,
                    t.agent_info.model_info.name if t.agent_info.model_info else None,
                    t.source or "adhoc",
                )
                rewards_by_key[key].append(t.verifier_result.rewards)
        pass_at_k = compute_pass_at_k_by_evals(trials)
        for key, ev in st.evals.items():
            rc = recomputed.evals.get(key)
            if rc is not None:
                if (ev.n_trials, ev.n_errors) != (rc.n_trials, rc.n_errors):
                    warn(f"evals[{key}] n_trials/n_errors {ev.n_trials}/{ev.n_errors} != recomputed {rc.n_trials}/{rc.n_errors}")
                norm = lambda rs: {k: {float(v): sorted(n) for v, n in d.items()} for k, d in rs.items()}  # noqa: E731
                if norm(ev.reward_stats) != norm(rc.reward_stats):
                    warn(f"evals[{key}].reward_stats differ from recomputed")
            if rewards_by_key.get(key):
                mean = Mean().compute(rewards_by_key[key])
                if mean not in ev.metrics:
                    warn(f"evals[{key}].metrics {ev.metrics} does not contain Harbor Mean {mean}")
            want = {int(k): v for k, v in pass_at_k.get(key, {}).items()}
            have = {int(k): v for k, v in ev.pass_at_k.items()}
            if any(abs(want.get(k, -1) - have.get(k, -2)) > 1e-9 for k in set(want) | set(have)):
                warn(f"evals[{key}].pass_at_k {have} != Harbor's {want}")

    print(f"\n{len(trials)} trial(s); {len(errors)} error(s), {len(warns)} warning(s)")
    if errors or (strict and warns):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
