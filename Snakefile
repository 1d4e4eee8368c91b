# debatelab: dataset download → zero-shot sampling → debate → calibration → protocol search → RL → evaluation.
# Run: snakemake --profile profiles/local        (laptop, bundled model and data)
#      snakemake --profile profiles/slurm        (cluster; edit profiles/slurm/config.yaml for your site)
from snakemake.utils import min_version

min_version("9.0")

# The default experiment, unless one is given with --configfile (merging the two would mix
# their datasets and agents, so a given file without an experiment name is refused). Found beside
# this Snakefile, so `--directory` may point elsewhere.
if not config.get("experiment"):
    from debatelab.config_schema import refuse_unnamed_experiment

    refuse_unnamed_experiment(workflow.configfiles)

    configfile: f"{workflow.basedir}/config/config.yaml"


# The report's front page: what was run, with which settings (`snakemake --report report.html`).
report: "report/workflow.rst"


# One rule file per stage, in DAG order; each mirrors a package of `src/debatelab/` and a folder
# of `workflow_scripts/`.
include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/models.smk"
include: "rules/attack.smk"
include: "rules/zero_shot.smk"
include: "rules/debate.smk"
include: "rules/uncertainty.smk"
include: "rules/confidence.smk"
include: "rules/train.smk"
include: "rules/evaluation.smk"
include: "rules/reporting.smk"


onstart:
    check_gpu_plans()


localrules:
    all,
    trained_agent,


rule all:
    input:
        all_targets(),
    default_target: True
