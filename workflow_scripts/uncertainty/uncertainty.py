from debatelab.runlog import job_log
from debatelab.uncertainty import UncertaintySettings, uncertainty_job

with job_log(snakemake.log[0]):
    uncertainty_job(
        questions_path=snakemake.input[0],
        out_path=snakemake.output.measures,
        rounds_out_path=snakemake.output.rounds,
        diagnostics_path=snakemake.output.diagnostics,
        selective_path=snakemake.output.selective,
        plot_path=snakemake.output.plot,
        settings=UncertaintySettings(**snakemake.params.settings),
    )
