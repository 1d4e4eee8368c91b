from debatelab.runlog import job_log
from debatelab.uncertainty_stage import uncertainty_job

if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        settings = dict(snakemake.params.settings)
        settings["selective_fractions"] = tuple(settings["selective_fractions"])
        uncertainty_job(
            questions_path=snakemake.input[0],
            out_path=snakemake.output.measures,
            rounds_out_path=snakemake.output.rounds,
            diagnostics_path=snakemake.output.diagnostics,
            selective_path=snakemake.output.selective,
            plot_path=snakemake.output.plot,
            **settings,
        )
