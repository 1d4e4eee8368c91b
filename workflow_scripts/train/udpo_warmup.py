from debatelab.config import Experiment
from debatelab.llm.agent import AgentSpec
from debatelab.runlog import job_log
from debatelab.training import TrainSettings
from debatelab.training.multi_agent_stage import udpo_warmup_job

if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        exp = Experiment(snakemake.config)  # the trackers: read from the config, not params (no rerun)
        udpo = snakemake.params.udpo
        udpo_warmup_job(
            dataset_path=snakemake.input.dataset,
            bases=udpo["bases"],
            participants=udpo["participants"],
            agents={name: AgentSpec.from_config(name, spec) for name, spec in udpo["agents"].items()},
            settings=TrainSettings.from_config(snakemake.params.settings),
            out_path=snakemake.output[0],
            limit=snakemake.params.limit,
            report_to=exp.report_to(snakemake.wildcards.run),
            experiment=exp.name,
            run=snakemake.wildcards.run,
        )
