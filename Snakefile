# debatelab: dataset download → zero-shot sampling → debate → calibration → protocol search → RL → evaluation.
# Run: snakemake --profile profiles/local        (laptop, bundled model and data)
#      snakemake --profile profiles/slurm        (cluster; edit profiles/slurm/config.yaml for your site)
from snakemake.utils import min_version

min_version("9.0")

# The default experiment, unless one is given with --configfile (merging the two would mix
# their datasets and agents).
if not config.get("experiment"):

    configfile: "config/config.yaml"


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
include: "rules/reporting.smk"


localrules:
    all,
    trained_agent,


rule all:
    input:
        all_targets(),
    default_target: True
