from debatelab.attack import RewriteSettings, attack_prompt_job
from debatelab.cost import Budget
from debatelab.llm import SamplingParams, make_backend
from debatelab.runlog import job_log

# Guarded: spawn-based engines (vLLM) re-run the main module in their worker processes.
if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        backend = make_backend(snakemake.params.backend, snakemake.input.model, **snakemake.params.backend_options)
        try:
            attack_prompt_job(
                snakemake.input.dataset,
                snakemake.output[0],
                dataset_name=snakemake.wildcards.dataset,
                model_name=snakemake.params.model,
                backend=backend,
                cache_dir=snakemake.params.cache_dir,
                settings=RewriteSettings(SamplingParams(**snakemake.params.sampling), snakemake.params.attempts),
                budget=Budget.from_config(snakemake.config),
            )
        finally:
            backend.close()
