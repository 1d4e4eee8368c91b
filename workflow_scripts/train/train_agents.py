from pathlib import Path

from debatelab.config import AgentSpec
from debatelab.runlog import job_log
from debatelab.training import TrainSettings
from debatelab.training.multi_agent_stage import train_agents_job

if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        udpo = snakemake.params.udpo
        train_agents_job(
            dataset_path=snakemake.input.dataset,
            bases=udpo["bases"],
            participants=udpo["participants"],
            agents={name: AgentSpec.from_config(name, spec) for name, spec in udpo["agents"].items()},
            coefficients_path=snakemake.input.get("coefficients"),
            out_dirs={name: str(Path(snakemake.output.agents) / name) for name in udpo["bases"]},
            metrics_path=snakemake.output.metrics,
            curves_path=snakemake.output.curves,
            settings_path=snakemake.output.settings,
            checkpoint_dir=snakemake.params.checkpoint_dir,
            run=snakemake.wildcards.run,
            settings=TrainSettings.from_config(snakemake.params.settings),
            limit=snakemake.params.limit,
        )
