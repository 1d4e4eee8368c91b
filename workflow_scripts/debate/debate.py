from debatelab.attack import read_attack_prompt
from debatelab.cost import Budget
from debatelab.debate.stage import DebateSettings, debate_job
from debatelab.runlog import job_log

# Guarded: spawn-based engines (vLLM) re-run the main module in their worker processes.
if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        debate_job(
            dataset_path=snakemake.input.dataset,
            zero_shot_paths=snakemake.params.zero_shot_paths,
            turns_path=snakemake.output.turns,
            questions_path=snakemake.output.questions,
            dataset_name=snakemake.wildcards.dataset,
            protocol_name=snakemake.wildcards.protocol,
            protocol_options=dict(snakemake.params.protocol),
            participants=snakemake.params.participants,
            agents=snakemake.params.agents,
            model_paths=snakemake.params.model_paths,
            cache_dirs=snakemake.params.cache_dirs,
            settings=DebateSettings.from_config(snakemake.params.settings),
            attack_prompt=read_attack_prompt(snakemake.input.get("attack")),
            # from the config, not params: raising the cap reruns no finished job
            budget=Budget.from_config(snakemake.config),
        )
