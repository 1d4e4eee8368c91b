from debatelab.attack import read_attack_prompt
from debatelab.cost import Budget
from debatelab.llm.agent import AgentSpec
from debatelab.runlog import job_log
from debatelab.zero_shot import ZeroShotSettings, zero_shot_job

# Guarded: spawn-based engines (vLLM) re-run the main module in their worker processes.
if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        zero_shot_job(
            dataset_path=snakemake.input.dataset,
            out_path=snakemake.output[0],
            dataset_name=snakemake.wildcards.dataset,
            agent=AgentSpec.from_config(
                snakemake.wildcards.agent, snakemake.params.agent, read_attack_prompt(snakemake.input.get("attack"))
            ),
            model_path=(
                {"base": snakemake.input.base, "adapter": f"{snakemake.input.model}/adapter"}
                if "base" in snakemake.input.keys()
                else snakemake.input.model
            ),
            settings=ZeroShotSettings.from_config(snakemake.params.settings),
            cache_dir=snakemake.params.cache_dir,
            # from the config, not params: raising the cap reruns no finished job
            budget=Budget.from_config(snakemake.config),
        )
