# Config validation, wildcard constraints and every input function, in one place. The checks and
# the logic behind these functions live in `debatelab.config.Experiment`, unit-tested without Snakemake.
import re

from snakemake.exceptions import WorkflowError

from debatelab.config import ConfigError, Experiment, check_config_files, validate_config
from debatelab.config_schema import naming_files
from debatelab.data.registry import SOURCE_CHOICES, parse_split_variant
from debatelab.micro.shipped import SHIPPED_DIR as MICRO_SHIPPED_DIR
from debatelab.models import MICRO_SOURCE

check_config_files(workflow.configfiles)  # a key given twice or an alias bomb is an error, before any pass over it
# Once, against config/schema.yaml: a config holding a key is refused first (keys come from the
# environment), a violation is one line naming the key and value (snakemake.utils.validate dumps the
# schema), and the defaults are filled as validate(set_default=True) fills them (tests/test_config.py).
# Experiment raises ConfigError naming the key and value of a config that doesn't hold together;
# either error names the config files first.
try:
    config.update(validate_config(config))
    EXP = Experiment(config)
    ACCELERATE_CONFIGS = {run: EXP.accelerate_config(run, workflow.basedir) for run in EXP.training_runs}
    EXP.check_model_files()  # a built model folder with a cut-off weight file is never rebuilt by itself
except ConfigError as error:
    raise naming_files(error, workflow.configfiles) from None
EXPERIMENT = EXP.name
DATASETS = EXP.datasets
MODELS = EXP.models
PREPARED_MODELS = EXP.prepared_models()  # resources/models/<folder>: what it is built from
MICRO_SHIPPED = str(MICRO_SHIPPED_DIR)  # the shipped micro model, rule micro_model's output
AGENTS = EXP.agents
PROTOCOLS = EXP.protocols
PAIRS = EXP.pairs
CALIBRATION = EXP.calibration
SEARCH = EXP.search
ATTACK = EXP.attack
TRAINING_RUNS = EXP.training_runs
PAPERS = EXP.evaluated_papers()


# --- cost --------------------------------------------------------------------------------------
from snakemake.logging import logger

from debatelab.cost import config_prices, estimate_message

MODEL_PRICES = config_prices(config)  # the summary rules' dollar columns (a changed price reruns only them)

_COST_ESTIMATE = estimate_message(config)  # None unless a model has a price (debatelab.cost)
if _COST_ESTIMATE is not None:
    (logger.warning if _COST_ESTIMATE[1] else logger.info)(_COST_ESTIMATE[0])


def _alternatives(names):
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


wildcard_constraints:
    experiment=re.escape(EXPERIMENT),
    dataset=_alternatives(DATASETS),
    benchmark=_alternatives({EXP.benchmark_of(d) for d in DATASETS}),
    variant=f"(?:{_alternatives(SOURCE_CHOICES)})(?:-seed[0-9]+)?",
    agent=_alternatives(AGENTS),
    model_folder=_alternatives(PREPARED_MODELS) if PREPARED_MODELS else "(?!)",
    protocol=_alternatives(PROTOCOLS) if PROTOCOLS else "(?!)",
    pair=_alternatives(PAIRS) if PAIRS else "(?!)",
    confidence_protocol="wsv|cga|hid",
    run=_alternatives(TRAINING_RUNS) if TRAINING_RUNS else "(?!)",
    paper=_alternatives(PAPERS),
    split=r"[A-Za-z0-9_.-]+",


RESULTS = EXP.results
LOGS = f"logs/{EXPERIMENT}"
BENCH = f"{RESULTS}/benchmarks"
# The software every rule's script runs with, written down as a conda environment (what
# tools/setup.sh installs into .venv); used only with `--sdm conda`, from the rules' folder.
SOFTWARE_ENV = "../envs/debatelab.yaml"


# --- GPU plans ---------------------------------------------------------------------------------
from snakemake.logging import logger

from debatelab import gpu_plan as gpu_planning

_GPU_PLANS = {}


def _profile_gpu_model(rule):
    """The GPU type the profile's set-resources names for a rule (None on a laptop)."""
    overrides = workflow.resource_settings.overwrite_resources or {}
    model = (overrides.get(rule) or {}).get("gpu_model")
    model = getattr(model, "raw", model)  # a snakemake Resource, or a plain value
    return str(model) if model is not None else None


def job_gpu_plan(rule, wildcards):
    """The rule's job's GPU plan (`debatelab.gpu_plan`), computed once per job and printed: a plan that
    cannot fit a node stops the run here, while the DAG is built, before any job is submitted."""
    key = (rule, tuple(sorted(dict(wildcards.items()).items())))
    if key not in _GPU_PLANS:
        gpu_model = _profile_gpu_model(rule)
        gpu_type = gpu_planning.job_gpu_type(config, gpu_model)
        try:
            plan = gpu_planning.experiment_job_plan(EXP, rule, dict(wildcards.items()), gpu_type)
        except gpu_planning.GpuPlanError as error:
            if gpu_model is not None:
                raise
            # a laptop's profile names no GPU type: nothing is submitted, so say it and go on
            logger.warning(f"GPU plan (for {gpu_type.name} GPUs; this profile names none): {error}")
            plan = gpu_planning.JobPlan(f"{rule} {dict(wildcards.items())}", gpu_type, gpu_planning.USABLE, {}, held=1)
        else:
            logger.info(f"GPU plan: {plan.describe()}")
        _GPU_PLANS[key] = plan
    return _GPU_PLANS[key]


GPU_RULES = ("zero_shot", "debate", "attack_prompt", "train", "train_agents", "udpo_warmup")


def check_gpu_plans():
    """Every GPU job the run will execute, planned before the first is submitted: Snakemake evaluates
    a job's resources only when the job is ready, so a job that no node holds would otherwise fail
    after its upstream jobs ran. Called from `onstart` (after the DAG is built; dry runs plan each
    job as they print it)."""
    executor = workflow.executor_plugin.name if workflow.executor_plugin is not None else "local"
    for job in workflow.dag.needrun_jobs():
        if job.rule.name in GPU_RULES:
            plan = job_gpu_plan(job.rule.name, job.wildcards)
            if plan.nodes > 1 and not executor.startswith("slurm"):
                raise WorkflowError(
                    f"training.runs.{job.wildcards.run}.nodes = {plan.nodes}: a run over several nodes is "
                    f"submitted to SLURM (snakemake --profile profiles/slurm); this run's executor is {executor}. "
                    "Set nodes: 1 to train on this machine"
                )


def planned_gpus(rule):
    """A rule's `gpu` resource: the GPU count of its job's plan over all its nodes (the profile keeps
    partitions and GPU types). A job that runs no model (self-consistency only votes) still asks for
    1: the profile sends its jobs to a GPU partition, where the SLURM plugin would otherwise ask for
    `--gpus=<type>:0`."""
    return lambda wildcards: max(1, job_gpu_plan(rule, wildcards).total_gpus)


def planned_nodes(rule):
    """A training rule's `nodes` resource (the SLURM plugin's `--nodes`): its run's `nodes`."""
    return lambda wildcards: job_gpu_plan(rule, wildcards).nodes


def planned_tasks_per_gpu(rule):
    """A training rule's `tasks_per_gpu`: the plugin's default 1 on one node; 0 over several, where
    the job runs one task per node (`srun --ntasks-per-node 1`, each starting its node's processes)
    and `--ntasks-per-gpu` would ask SLURM for one task per GPU instead."""
    return lambda wildcards: 0 if job_gpu_plan(rule, wildcards).nodes > 1 else 1


def planned_tasks(rule):
    """Over several nodes, one task per node (`--ntasks=<nodes>` beside `--nodes`); else unset."""
    return lambda wildcards: job_gpu_plan(rule, wildcards).nodes if job_gpu_plan(rule, wildcards).nodes > 1 else None


def planned_mpi(rule):
    """Over several nodes, `mpi: srun`: the SLURM plugin's job step then runs the job's script in the
    batch step instead of inside an `srun -n1` of one node, and the script starts the per-node
    tasks itself (the plugins' way for jobs that call srun); else unset (the usual step)."""
    return lambda wildcards: "srun" if job_gpu_plan(rule, wildcards).nodes > 1 else None


# --- GPU-hour prices ----------------------------------------------------------------------------
from debatelab.cost import any_gpu_price, gpu_groups

# With a `gpu_hour` price the summaries read the zero_shot and debate jobs' benchmark files (outputs of
# those jobs) and get each job's GPU groups from its plan (`debatelab.cost.gpu_groups`); without one
# they take neither, so the DAG and the summaries' params are what they were.
GPU_PRICED = any_gpu_price(MODEL_PRICES)


def gpu_cost_job(rule, dataset, key, value, agents):
    """One job as the summaries' `gpu_jobs` params carry it: benchmark file, keys, GPU groups."""
    plan = job_gpu_plan(rule, {"dataset": dataset, key: value})
    local = [AGENTS[a]["model"] for a in agents if EXP.agent_settings(a, dataset)["backend"] != "openai"]
    return {
        "benchmark": f"{BENCH}/{rule}/{dataset}/{value}.tsv",
        "dataset": dataset,
        key: value,
        "groups": gpu_groups(plan, gpu_planning.engine_models(EXP, agents), local),
    }


def zero_shot_gpu_jobs():
    if not GPU_PRICED:
        return []
    return [
        gpu_cost_job("zero_shot", d, "agent", a, [a])
        for d in EXP.evaluated_datasets()
        for a in AGENTS
        if d in EXP.agent_datasets(a)
    ]


def debate_gpu_jobs():
    if not GPU_PRICED:
        return []
    return [
        gpu_cost_job("debate", d, "protocol", p, EXP.protocol_agents(p))
        for p in PROTOCOLS
        for d in EXP.protocol_datasets(p)
    ]


def prepare_model_inputs(wildcards):
    """The shipped micro model for a folder prepared from it (rule micro_model rebuilds it on demand)."""
    source = PREPARED_MODELS[wildcards.model_folder]["source"]
    return {"micro": MICRO_SHIPPED} if source == MICRO_SOURCE else {}


def zero_shot_summary_inputs(wildcards):
    inputs = {"answers": zero_shot_files()}
    if GPU_PRICED:
        inputs["benchmarks"] = [job["benchmark"] for job in zero_shot_gpu_jobs()]
    return inputs


def debate_summary_inputs(wildcards):
    inputs = {"questions": debate_files("questions"), "turns": debate_files("turns")}
    if GPU_PRICED:  # the zero-shot answers the debates start from carry their jobs' GPU time
        inputs["benchmarks"] = [job["benchmark"] for job in debate_gpu_jobs()]
        inputs["zero_shot_benchmarks"] = [job["benchmark"] for job in zero_shot_gpu_jobs()]
        inputs["zero_shot"] = zero_shot_files()
    return inputs


#: the summary rules' extra params, only with a `gpu_hour` price (a run without one keeps its params)
ZERO_SHOT_GPU_PARAMS = {"gpu_jobs": lambda wildcards: zero_shot_gpu_jobs()} if GPU_PRICED else {}
from debatelab.cost import any_price, prices_of

#: the evaluation's prices, only when a model has one (the papers' tables then show dollars)
EVALUATION_PRICE_PARAMS = (
    {"prices": MODEL_PRICES, **({"gpu_jobs": lambda wildcards: debate_gpu_jobs(),
                                  "zero_shot_gpu_jobs": lambda wildcards: zero_shot_gpu_jobs()} if GPU_PRICED else {})}
    if any_price(prices_of(MODEL_PRICES))
    else {}
)
DEBATE_GPU_PARAMS = (
    {"gpu_jobs": lambda wildcards: debate_gpu_jobs(), "zero_shot_gpu_jobs": lambda wildcards: zero_shot_gpu_jobs()}
    if GPU_PRICED
    else {}
)


# --- data and models ---------------------------------------------------------------------------


def dataset_file(wildcards):
    return EXP.dataset_path(wildcards.dataset)


def agent_model_dir(wildcards):
    return EXP.agent_model_dir(wildcards.agent)


def generation_cache_dir(model):
    return f"{RESULTS}/cache/{model}"


# --- zero-shot ---------------------------------------------------------------------------------


def attack_input(dataset, agents):
    """{"attack": the dataset's AutoTransform prompt} when a rewriter is set and one of `agents` is adversarial."""
    return {"attack": f"{RESULTS}/attack/{dataset}.json"} if EXP.uses_attack_prompt(agents) else {}


def zero_shot_inputs(wildcards):
    base = EXP.adapter_base(AGENTS[wildcards.agent]["model"])
    return {
        "dataset": dataset_file(wildcards),
        "model": agent_model_dir(wildcards),
        # an adapter-served model: its base's folder too (the job serves the adapter on it)
        **({"base": EXP.model_dir(base)} if base is not None else {}),
        **attack_input(wildcards.dataset, [wildcards.agent]),
    }


def zero_shot_path(dataset, agent):
    return f"{RESULTS}/zero_shot/{dataset}/{agent}.parquet"


def zero_shot_files():
    return [zero_shot_path(d, a) for d in EXP.evaluated_datasets() for a in AGENTS if d in EXP.agent_datasets(a)]


# --- debate ------------------------------------------------------------------------------------


def debate_zero_shot_paths(wildcards):
    return {a: zero_shot_path(wildcards.dataset, a) for a in EXP.protocol_agents(wildcards.protocol)}


def debate_inputs(wildcards):
    agents = EXP.protocol_agents(wildcards.protocol)
    return {
        "dataset": dataset_file(wildcards),
        "zero_shot": list(debate_zero_shot_paths(wildcards).values()),
        "models": EXP.model_input_dirs(EXP.protocol_models(wildcards.protocol)),
        **attack_input(wildcards.dataset, agents),
    }


def debate_agent_settings(wildcards):
    return {a: EXP.agent_settings(a, wildcards.dataset) for a in EXP.protocol_agents(wildcards.protocol)}


def debate_files(kind):
    return [f"{RESULTS}/debate/{d}/{p}/{kind}.parquet" for p in PROTOCOLS for d in EXP.protocol_datasets(p)]


def uncertainty_files():
    return [
        f"{RESULTS}/uncertainty/{d}/{p}{suffix}"
        for p in PROTOCOLS
        for d in EXP.protocol_datasets(p)
        for suffix in (".parquet", ".rounds.parquet", ".diagnostics.csv", ".selective.csv", ".selective.png")
    ]


# --- confidence protocols ----------------------------------------------------------------------


def pair_validation_dataset(wildcards):
    return EXP.pair_validation_dataset(wildcards.pair, wildcards.dataset)


def pair_inputs(wildcards):
    """A pair's streams come from the dataset, both agents' zero-shot answers and the pair's debate;
    with a fixed validation dataset, from its files too (the `val_*` inputs)."""
    spec = PAIRS[wildcards.pair]

    def files(dataset, prefix=""):
        return {
            f"{prefix}dataset": EXP.dataset_path(dataset),
            f"{prefix}zero_shot": [zero_shot_path(dataset, a) for a in spec["agents"]],
            f"{prefix}turns": f"{RESULTS}/debate/{dataset}/{spec['debate']}/turns.parquet",
        }

    inputs = files(wildcards.dataset)
    val = pair_validation_dataset(wildcards)
    if val:
        inputs.update(files(val, "val_"))
    return inputs


def search_files(wildcards):
    return [f"{RESULTS}/search/{wildcards.dataset}/{wildcards.pair}/{p}.json" for p in SEARCH["protocols"]]


def confidence_metric_files():
    return [f"{RESULTS}/protocols/{d}/{p}/metrics.csv" for p in PAIRS for d in EXP.pair_datasets(p)]


def confidence_targets():
    per_pair = [(p, d) for p in PAIRS for d in EXP.pair_datasets(p)]
    targets = [f"{RESULTS}/calibration/{d}/{p}{suffix}" for p, d in per_pair for suffix in (".json", ".csv")]
    targets += [f"{RESULTS}/protocols/{d}/{p}/{name}" for p, d in per_pair for name in ("reliability.png", "accuracy_rejection.png")]
    targets += [f"{RESULTS}/search/{d}/{p}/{c}.history.png" for p, d in per_pair for c in SEARCH["protocols"]]
    summary = ("confidence.csv", "confidence_lift.csv", "confidence_paper.csv", "confidence_lift.png")
    return targets + [f"{RESULTS}/summary/{name}" for name in summary]


# --- evaluation --------------------------------------------------------------------------------


def evaluation_inputs(wildcards):
    """Every stage's outputs: a paper's tables may draw on any of them (loaded only where used)."""
    measures = [(d, p) for p in PROTOCOLS for d in EXP.protocol_datasets(p)]
    inputs = {
        "questions": debate_files("questions"),
        "turns": debate_files("turns"),
        "zero_shot": zero_shot_files(),
        "uncertainty": [f"{RESULTS}/uncertainty/{d}/{p}.parquet" for d, p in measures],
        "rounds": [f"{RESULTS}/uncertainty/{d}/{p}.rounds.parquet" for d, p in measures],
        "training": [f"{RESULTS}/train/{run}/metrics.parquet" for run in TRAINING_RUNS],
    }
    if PAIRS:
        per_pair = [(p, d) for p in PAIRS for d in EXP.pair_datasets(p)]
        inputs["confidence_lift"] = f"{RESULTS}/summary/confidence_lift.csv"
        inputs["calibration"] = [f"{RESULTS}/calibration/{d}/{p}.csv" for p, d in per_pair]
        inputs["confidence_metrics"] = confidence_metric_files()
        inputs["confidence_streams"] = [f"{RESULTS}/streams/{d}/{p}.parquet" for p, d in per_pair]
    if GPU_PRICED:  # SVR-MAD's dollars count the jobs' GPU-hours as the debate summary does
        inputs["benchmarks"] = [job["benchmark"] for job in debate_gpu_jobs()]
        inputs["zero_shot_benchmarks"] = [job["benchmark"] for job in zero_shot_gpu_jobs()]
    return inputs


# --- the default target ------------------------------------------------------------------------


def all_targets():
    targets = [f"{RESULTS}/summary/zero_shot.csv", f"{RESULTS}/summary/zero_shot.png"]
    if PROTOCOLS:
        targets += [
            f"{RESULTS}/summary/debate.csv",
            f"{RESULTS}/summary/debate_paper.csv",
            f"{RESULTS}/summary/debate_cost_accuracy.png",
            *uncertainty_files(),
        ]
    if PAIRS:
        targets += confidence_targets()
    for run in TRAINING_RUNS:
        targets += [f"{RESULTS}/train/{run}/{name}" for name in ("metrics.parquet", "curves.png", "settings.json")]
    targets += [f"{RESULTS}/tables/{paper}" for paper in PAPERS]
    if EXP.comparisons:
        targets += [f"{RESULTS}/summary/comparisons.csv", f"{RESULTS}/summary/comparisons.png"]
    return targets


# --- training ----------------------------------------------------------------------------------
from debatelab.training.settings import udpo_job_settings


def heldout_input(wildcards):
    """{"heldout": the dataset file} when the run measures held-out accuracy, else nothing."""
    dataset = EXP.heldout_dataset(wildcards.run)
    return {"heldout": EXP.dataset_path(dataset)} if dataset is not None else {}


def multi_agent_job(run):
    """Inputs, settings and per-agent specs of a multi-agent run, as the training rules pass them."""
    agents = EXP.run_agents(run)
    return {
        "bases": {a: EXP.agent_model_dir(a) for a in agents},
        "agents": {a: EXP.agent_settings(a) for a in agents},
        "participants": TRAINING_RUNS[run]["participants"],
    }
