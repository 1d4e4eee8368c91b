from debatelab.models import prepare_model
from debatelab.runlog import job_log

with job_log(snakemake.log[0]):
    settings = snakemake.params.settings
    prepare_model(
        snakemake.wildcards.model_folder,
        settings["source"],
        snakemake.output[0],
        dtype=settings.get("dtype", "float32"),
        seed=settings.get("seed", 0),
        include=settings.get("include"),
    )
