from debatelab.runlog import job_log
from debatelab.training import TrainSettings
from debatelab.training.multi_agent_stage import udpo_coefficients_job

if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        udpo_coefficients_job(
            warmup_path=snakemake.input.warmup,
            out_path=snakemake.output[0],
            settings=TrainSettings.from_config(snakemake.params.settings),
        )
