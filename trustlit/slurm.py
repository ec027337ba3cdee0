"""``trustlit slurm submit``: render an sbatch script for a recipe, check it, and submit it.

    trustlit slurm submit RECIPE [--nodes N] [--gpus-per-node G] [--time T] ... [--dry-run] [-- OVERRIDES...]

The scripts come from the templates in ``slurm/`` (one per layout: CPU, one GPU, DDP on one node,
DDP and FSDP on many nodes), so that what runs on the cluster is a file a user can read. Every
template launches one task per device with ``srun`` (Lightning then detects ``SLURMEnvironment``),
asks for ``SIGUSR1`` 90 s before the time limit (Lightning's handler writes ``hpc_ckpt_N.ckpt`` and
requeues the job, which resumes from it), and gives each job its own ``default_root_dir``
(``ROOT/$SLURM_JOB_ID``): Lightning resumes from any ``hpc_ckpt_*.ckpt`` it finds there, so a shared
directory would make an unrelated job resume another's checkpoint.

The combination is checked before anything is written or submitted: the task count per node must
equal ``trainer.devices``, multi-node runs need GPUs and a strategy that spans nodes, strategies
that spawn their own processes cannot run under ``srun``, the recipe and ``-c`` files must exist.
The values are read from the recipe, the ``-c`` files and ``--trainer.*`` overrides after ``--``,
then the options of this command, which win over the recipe (a conflict with an explicit
override is an error).
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import string
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from trustlit.resources import find_recipe, shipped_dir

TEMPLATES = {
    "cpu": "CPU processes on one node, DDP over gloo (what the tests run)",
    "gpu": "one GPU",
    "ddp": "several GPUs of one node, DDP",
    "multinode_ddp": "GPUs on several nodes, DDP",
    "multinode_fsdp": "GPUs on several nodes, FSDP",
}
# Strategies that start their own worker processes: under srun each task would spawn again.
SPAWNING_STRATEGIES = ("dp", "ddp_spawn", "ddp_fork", "ddp_notebook")
MULTINODE_STRATEGIES = ("auto", "ddp", "fsdp", "model_parallel", "deepspeed")
FSDP_STRATEGIES = ("fsdp", "model_parallel")
# Lightning turns SLURMEnvironment off for jobs with these names (it takes them for interactive shells).
INTERACTIVE_JOB_NAMES = ("bash", "interactive")
# Loggers whose files go under ``init_args.save_dir``: pointed at the job's directory.
SAVE_DIR_LOGGERS = ("CSVLogger", "TensorBoardLogger", "WandbLogger")
TRAINER_KEYS = ("accelerator", "devices", "num_nodes", "strategy", "logger", "default_root_dir")
TIME_FORMAT = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")


class SlurmConfigError(ValueError):
    """A combination of recipe and options that would not run (or not resume) under SLURM."""


class ScriptTemplate(string.Template):
    """``{{name}}`` placeholders, so that the shell's own ``$VAR`` and ``${VAR}`` stay as written."""

    pattern = r"""
    \{\{(?:
      (?P<escaped>\{\{) |
      (?P<named>[a-z_][a-z0-9_]*)\}\} |
      (?P<braced>(?!)) |
      (?P<invalid>)
    )
    """


@dataclass(frozen=True)
class TrainerLayout:
    """What the script asks SLURM for, and what the Trainer is told, from the same numbers."""

    accelerator: str  # "cpu" or "gpu"
    devices: int  # per node: --ntasks-per-node, trainer.devices, and --gpus-per-node on GPUs
    num_nodes: int
    strategy: str  # a Lightning strategy name, or a class name given by class_path

    @property
    def template(self) -> str:
        if self.accelerator == "cpu":
            return "cpu"
        if self.num_nodes == 1:
            return "gpu" if self.devices == 1 else "ddp"
        return "multinode_fsdp" if self.strategy in FSDP_STRATEGIES else "multinode_ddp"


# ---------------------------------------------------------------------------------------- the recipe


def recipe_file(recipe: Path) -> Path:
    """The recipe's file, absolute: a path, or a listed name (``quickstart/finetune_fictitious``)."""
    try:
        return find_recipe(str(recipe)).resolve()
    except FileNotFoundError as error:
        raise SlurmConfigError(str(error)) from None


def _load_yaml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise SlurmConfigError(f"{what} not found: {path}")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise SlurmConfigError(f"{what} {path} is not a YAML mapping")
    return data


def _is_value(arg: str) -> bool:
    """An argument that is not an option: anything not starting with ``-``, or a negative number."""
    return not arg.startswith("-") or bool(re.fullmatch(r"-\d+(\.\d*)?([eE][-+]?\d+)?", arg))


def _override_pairs(overrides: Sequence[str]) -> list[tuple[str, str]]:
    """``(key, value)`` of each ``--key=value`` / ``--key value`` / ``-c value`` in LightningCLI's arguments."""
    pairs, i = [], 0
    while i < len(overrides):
        arg = overrides[i]
        if arg.startswith("-") and "=" in arg:
            key, value = arg.split("=", 1)
            pairs.append((key, value))
        elif arg.startswith("-") and i + 1 < len(overrides) and _is_value(overrides[i + 1]):
            pairs.append((arg, overrides[i + 1]))
            i += 1
        i += 1
    return pairs


def trainer_settings(recipe: Path, overrides: Sequence[str]) -> tuple[dict[str, Any], set[str]]:
    """The trainer keys that decide the job's layout, as LightningCLI would see them.

    Returns the values (recipe, then ``-c`` files and ``--trainer.KEY`` overrides in order) and the
    keys set explicitly on the command line. Only :data:`TRAINER_KEYS` are followed: enough to
    render and check the script without building the model.
    """
    trainer = dict(_load_yaml(recipe, "recipe").get("trainer") or {})
    explicit: set[str] = set()
    for key, value in _override_pairs(overrides):
        if key in ("-c", "--config"):
            trainer.update(_load_yaml(Path(value), "config file").get("trainer") or {})
        elif key.startswith("--trainer."):
            name = key.removeprefix("--trainer.").split(".")[0]
            if name in TRAINER_KEYS:
                explicit.add(key.removeprefix("--trainer."))
                if "." not in key.removeprefix("--trainer."):
                    trainer[name] = yaml.safe_load(value)
    return trainer, explicit


def strategy_name(strategy: Any) -> str:
    """``ddp``, ``fsdp``... for a strategy given by name or by ``class_path``."""
    if strategy is None:
        return "auto"
    if isinstance(strategy, dict):
        class_name = str(strategy.get("class_path", "")).rsplit(".", 1)[-1]
        known = {"DDPStrategy": "ddp", "FSDPStrategy": "fsdp", "ModelParallelStrategy": "model_parallel"}
        known |= {"DeepSpeedStrategy": "deepspeed", "SingleDeviceStrategy": "single_device"}
        return known.get(class_name, class_name)
    return str(strategy).lower()


# ---------------------------------------------------------------------------------------- checks


def _accelerator(trainer: dict[str, Any], gpus_per_node: int | None, explicit: set[str]) -> str:
    configured = str(trainer.get("accelerator") or "auto").lower()
    if gpus_per_node is not None:
        wanted = "gpu" if gpus_per_node > 0 else "cpu"
        if "accelerator" in explicit and configured.replace("cuda", "gpu") != wanted:
            raise SlurmConfigError(
                f"--gpus-per-node={gpus_per_node} but --trainer.accelerator={configured}: "
                f"leave the override out, or set it to {wanted}"
            )
        return wanted
    if configured in ("gpu", "cuda"):
        return "gpu"
    if configured == "cpu":
        return "cpu"
    raise SlurmConfigError(
        f"trainer.accelerator={configured}: under SLURM the job must know whether to ask for GPUs; "
        "pass --gpus-per-node N (0 for CPU processes), or set trainer.accelerator to cpu or gpu"
    )


def _devices(trainer: dict[str, Any], accelerator: str, gpus_per_node: int | None, explicit: set[str]) -> int:
    configured = trainer.get("devices", 1)
    if accelerator == "gpu" and gpus_per_node:
        if "devices" in explicit and configured != gpus_per_node:
            raise SlurmConfigError(
                f"--gpus-per-node={gpus_per_node} but --trainer.devices={configured}: one task per GPU needs "
                f"trainer.devices={gpus_per_node} (leave the override out; --gpus-per-node sets it)"
            )
        return gpus_per_node
    if isinstance(configured, bool) or not isinstance(configured, int) or configured < 1:
        raise SlurmConfigError(
            f"trainer.devices={configured!r}: under SLURM it is the number of tasks per node "
            "(--ntasks-per-node), so it must be a positive integer; set --trainer.devices=N"
            + (" or pass --gpus-per-node N" if accelerator == "gpu" else "")
        )
    return configured


def _num_nodes(trainer: dict[str, Any], nodes: int | None, explicit: set[str]) -> int:
    configured = trainer.get("num_nodes", 1)
    if nodes is None:
        nodes = configured
    elif "num_nodes" in explicit and configured != nodes:
        raise SlurmConfigError(
            f"--nodes={nodes} but --trainer.num_nodes={configured}: they are the same number "
            "(leave the override out; --nodes sets it)"
        )
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise SlurmConfigError(f"trainer.num_nodes={nodes!r}: must be a positive integer")
    return nodes


def _check_strategy(layout: TrainerLayout) -> None:
    tasks = layout.devices * layout.num_nodes
    name = layout.strategy
    if tasks > 1 and (name in SPAWNING_STRATEGIES or name.startswith(SPAWNING_STRATEGIES[1:])):
        raise SlurmConfigError(
            f"strategy={name} starts its own processes, but srun already starts one per device "
            f"({tasks} tasks): use strategy=ddp (or fsdp on GPUs)"
        )
    if tasks > 1 and name == "single_device":
        raise SlurmConfigError(f"strategy=single_device with {tasks} tasks: use ddp, or --trainer.devices=1")
    if layout.accelerator == "cpu" and name.startswith("fsdp"):
        raise SlurmConfigError(
            "strategy=fsdp with accelerator=cpu: Lightning's FSDP refuses CPU; use ddp, or "
            "model_parallel (FSDP2, runs on CPU with gloo), or --gpus-per-node N"
        )
    if layout.num_nodes > 1 and layout.accelerator == "cpu":
        raise SlurmConfigError(
            f"nodes={layout.num_nodes} with accelerator=cpu (strategy={name} on gloo): CPU runs use one node; "
            "multi-node runs need --gpus-per-node N and strategy ddp or fsdp"
        )
    if layout.num_nodes > 1 and not name.startswith(MULTINODE_STRATEGIES):
        raise SlurmConfigError(
            f"nodes={layout.num_nodes} with strategy={name}: it does not span nodes; "
            f"use one of {', '.join(MULTINODE_STRATEGIES)}"
        )


def plan_layout(
    trainer: dict[str, Any],
    explicit: set[str],
    *,
    nodes: int | None,
    gpus_per_node: int | None,
    ntasks_per_node: int | None,
    strategy: str | None,
) -> TrainerLayout:
    """The checked layout; :class:`SlurmConfigError` names the value and what would be valid."""
    if gpus_per_node is not None and gpus_per_node < 0:
        raise SlurmConfigError(f"--gpus-per-node={gpus_per_node}: must be 0 (CPU) or more")
    accelerator = _accelerator(trainer, gpus_per_node, explicit)
    devices = _devices(trainer, accelerator, gpus_per_node, explicit)
    if ntasks_per_node is not None and ntasks_per_node != devices:
        raise SlurmConfigError(
            f"--ntasks-per-node={ntasks_per_node} but trainer.devices={devices}: Lightning under SLURM needs "
            f"one task per device; use --ntasks-per-node={devices} (or leave it out), or --trainer.devices="
            f"{ntasks_per_node}"
        )
    if strategy is not None and "strategy" in explicit:
        raise SlurmConfigError("--strategy and --trainer.strategy both given: keep one")
    name = strategy or strategy_name(trainer.get("strategy"))
    layout = TrainerLayout(accelerator, devices, _num_nodes(trainer, nodes, explicit), name)
    _check_strategy(layout)
    return layout


# ---------------------------------------------------------------------------------------- the script


@dataclass(frozen=True)
class SubmitOptions:
    recipe: Path
    overrides: list[str]
    nodes: int | None = None
    gpus_per_node: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    job_name: str | None = None
    strategy: str | None = None
    root_dir: Path | None = None
    python: str = sys.executable
    setup: tuple[str, ...] = ()
    sbatch_args: tuple[str, ...] = ()


def job_name_and_root(options: SubmitOptions) -> tuple[str, Path]:
    """The job name (default: the recipe's stem) and ROOT (default ``runs/slurm/NAME``), absolute."""
    job_name = options.job_name or options.recipe.stem
    return job_name, (options.root_dir or Path("runs") / "slurm" / job_name).resolve()


def _check_job(options: SubmitOptions, job_name: str, root_dir: Path) -> None:
    if job_name in INTERACTIVE_JOB_NAMES or not re.fullmatch(r"[\w.+-]+", job_name):
        raise SlurmConfigError(
            f"--job-name={job_name!r}: use letters, digits and ._+- only, and not bash or interactive "
            "(Lightning turns SLURMEnvironment off for those)"
        )
    if re.search(r"\s", str(root_dir)):
        raise SlurmConfigError(f"--root-dir={root_dir}: #SBATCH --output cannot take a path with whitespace")
    if options.time is not None and not TIME_FORMAT.match(options.time):
        raise SlurmConfigError(f"--time={options.time!r}: use MINUTES, HH:MM:SS or DAYS-HH:MM:SS")
    if options.cpus_per_task is not None and options.cpus_per_task < 1:
        raise SlurmConfigError(f"--cpus-per-task={options.cpus_per_task}: must be at least 1")
    for key in ("default_root_dir", "logger.init_args.save_dir"):
        if any(arg.startswith(f"--trainer.{key}") for arg in options.overrides):
            raise SlurmConfigError(
                f"--trainer.{key} is set per job (ROOT/$SLURM_JOB_ID, so a requeued job finds its checkpoint "
                "and no other job does): choose ROOT with --root-dir"
            )


def _logger_dir_arg(trainer: dict[str, Any]) -> str:
    """Points a single file-writing logger at the job's directory (W&B runs then live next to the checkpoints)."""
    logger = trainer.get("logger")
    if isinstance(logger, dict) and str(logger.get("class_path", "")).endswith(SAVE_DIR_LOGGERS):
        return ' \\\n    --trainer.logger.init_args.save_dir="$RUN_DIR"'
    return ""


def _argument_lines(arguments: Sequence[str]) -> list[str]:
    """Shell-quoted arguments, an option and its separate value (``-c FILE``) on one line."""
    lines: list[str] = []
    for arg in arguments:
        value_of_previous = lines and lines[-1].startswith("-") and " " not in lines[-1] and "=" not in lines[-1]
        if value_of_previous and _is_value(arg):
            lines[-1] += f" {shlex.quote(arg)}"
        else:
            lines.append(shlex.quote(arg))
    return lines


def _sbatch_lines(options: SubmitOptions) -> str:
    lines = [f"#SBATCH --time={options.time}"] if options.time else []
    lines += [f"#SBATCH --partition={options.partition}"] if options.partition else []
    lines += [f"#SBATCH --account={options.account}"] if options.account else []
    lines += [f"#SBATCH {arg}" for arg in options.sbatch_args]
    return "\n".join(lines)


def render_script(options: SubmitOptions) -> str:
    """The sbatch script for ``options``, checked; raises :class:`SlurmConfigError` before any write."""
    recipe = recipe_file(options.recipe)
    trainer, explicit = trainer_settings(recipe, options.overrides)
    layout = plan_layout(
        trainer,
        explicit,
        nodes=options.nodes,
        gpus_per_node=options.gpus_per_node,
        ntasks_per_node=options.ntasks_per_node,
        strategy=options.strategy,
    )
    job_name, root_dir = job_name_and_root(options)
    _check_job(options, job_name, root_dir)
    overrides = [*options.overrides, *([f"--trainer.strategy={options.strategy}"] if options.strategy else [])]
    check_command(recipe, overrides)
    values = {
        "job_name": job_name,
        "nodes": layout.num_nodes,
        "ntasks_per_node": layout.devices,
        "gpus_per_node": layout.devices,
        "cpus_per_task": options.cpus_per_task or (1 if layout.accelerator == "cpu" else 4),
        "sbatch_extra": _sbatch_lines(options),
        "workdir": shlex.quote(str(Path.cwd())),
        "root_dir": shlex.quote(str(root_dir)),
        "log": str(root_dir / "%x-%j.out"),
        "setup": "\n".join(options.setup),
        "python": shlex.quote(options.python),
        "recipe": shlex.quote(str(recipe)),
        "overrides": "".join(f" \\\n    {line}" for line in _argument_lines(overrides)),
        "logger_dir": _logger_dir_arg(trainer),
    }
    text = (shipped_dir("slurm") / f"{layout.template}.sbatch").read_text(encoding="utf-8")
    return ScriptTemplate(text).substitute(values)


def check_command(recipe: Path, overrides: Sequence[str]) -> None:
    """Parses ``trustlit fit -c RECIPE OVERRIDES`` with LightningCLI's parser (building nothing), so that
    a typo fails here and not after the job waited in the queue."""
    from trustlit.errors import root_message
    from trustlit.lightning_cli import parse_only

    checked = [arg for arg in overrides if not arg.startswith("--print_config")]  # it would print and exit
    try:
        parse_only(["fit", "-c", str(recipe), *checked])
    except (ValueError, KeyError, OSError) as error:
        raise SlurmConfigError(root_message(error)) from error


def submit(script: str, root_dir: Path) -> str:
    """Submits ``script`` with ``sbatch --parsable`` and returns the job id."""
    if shutil.which("sbatch") is None:
        raise SlurmConfigError("sbatch not found on PATH: submit from a SLURM login node, or use --dry-run")
    root_dir.mkdir(parents=True, exist_ok=True)  # SLURM opens the log there and does not create directories
    result = subprocess.run(["sbatch", "--parsable"], input=script, text=True, capture_output=True, check=False)
    if result.returncode != 0:
        raise SlurmConfigError(f"sbatch refused the job: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout.strip().split(";")[0]


# ---------------------------------------------------------------------------------------- the command


def build_parser() -> argparse.ArgumentParser:
    templates = "\n".join(f"  {name:15s} {text}" for name, text in TEMPLATES.items())
    parser = argparse.ArgumentParser(
        prog="trustlit slurm submit",
        usage="trustlit slurm submit RECIPE [options] [-- LightningCLI overrides...]",
        description="Render the sbatch script for RECIPE from slurm/<template>.sbatch, check it, submit it, "
        "and print the job id. The job runs `trustlit fit -c RECIPE OVERRIDES` with one task per "
        "device, checkpoints and requeues itself on SIGUSR1 (90 s before its time limit, or "
        "`scancel --signal=USR1 JOB`), and resumes from ROOT/JOB_ID.",
        epilog=f"templates (chosen from the accelerator, devices, nodes and strategy):\n{templates}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "recipe", type=Path, help="the recipe: a YAML path or a name from `trustlit recipes` (as for `trustlit fit -c`)"
    )
    parser.add_argument(
        "--nodes", type=int, metavar="N", help="nodes (trainer.num_nodes; default: the recipe's, else 1)"
    )
    parser.add_argument(
        "--gpus-per-node", type=int, metavar="G", help="GPUs per node = tasks per node = trainer.devices; 0: CPU"
    )
    parser.add_argument("--ntasks-per-node", type=int, metavar="T", help="must equal trainer.devices (checked)")
    parser.add_argument("--cpus-per-task", type=int, metavar="C", help="CPUs per task (default 1 on CPU, 4 on GPU)")
    parser.add_argument("--time", metavar="T", help="time limit, e.g. 04:00:00 (SIGUSR1 comes 90 s before it)")
    parser.add_argument("--partition", help="SLURM partition")
    parser.add_argument("--account", help="SLURM account")
    parser.add_argument("--job-name", help="job name (default: the recipe's file name)")
    parser.add_argument("--strategy", help="trainer.strategy, e.g. ddp or fsdp (default: the recipe's)")
    parser.add_argument(
        "--root-dir", type=Path, metavar="ROOT", help="runs: ROOT/JOB_ID, logs: ROOT (default runs/slurm/NAME)"
    )
    parser.add_argument("--python", default=sys.executable, help="the Python with trustlit (default: this one)")
    parser.add_argument(
        "--setup", action="append", default=[], metavar="LINE", help="a shell line run before srun (module load ...)"
    )
    parser.add_argument("--sbatch", action="append", default=[], metavar="ARG", help="extra #SBATCH line: --mem=64G")
    parser.add_argument("--dry-run", action="store_true", help="print the script; submit and write nothing")
    return parser


def _split_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def options_from_args(argv: Sequence[str]) -> tuple[SubmitOptions, bool]:
    """Parsed ``submit`` arguments and the ``--dry-run`` flag."""
    own, overrides = _split_overrides(argv)
    args = build_parser().parse_args(own)
    options = SubmitOptions(
        recipe=args.recipe,
        overrides=overrides,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        ntasks_per_node=args.ntasks_per_node,
        cpus_per_task=args.cpus_per_task,
        time=args.time,
        partition=args.partition,
        account=args.account,
        job_name=args.job_name,
        strategy=args.strategy,
        root_dir=args.root_dir,
        python=args.python,
        setup=tuple(args.setup),
        sbatch_args=tuple(args.sbatch),
    )
    return options, args.dry_run


def main(argv: Sequence[str] | None = None) -> None:
    """``trustlit slurm ...``: ``submit`` is the one subcommand; ``--help`` shows its options."""
    argv = list(sys.argv[2:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        build_parser().print_help()
        raise SystemExit(0 if argv else 2)
    if argv[0] != "submit":
        raise SystemExit(f"trustlit slurm: unknown command {argv[0]!r}; use: trustlit slurm submit RECIPE ... (--help)")
    options, dry_run = options_from_args(argv[1:])
    try:
        script = render_script(options)
        if dry_run:
            print(script, end="")
            return
        job_name, root_dir = job_name_and_root(options)
        job_id = submit(script, root_dir)
    except SlurmConfigError as error:
        raise SystemExit(f"trustlit slurm submit: error: {error}") from None
    print(job_id)
    print(f"log: {root_dir}/{job_name}-{job_id}.out  run dir: {root_dir}/{job_id}", file=sys.stderr)


if __name__ == "__main__":
    main()
