#!/bin/bash
# expect: pass
# Llama-3-70B on 32 nodes × 8 H100 with Megatron-LM: TP 8 (in-node), PP 4 with 4 virtual
# stages per rank (5 layers each), DP 8, distributed optimizer, sequence parallel.
# dtplan-args: --hardware h100
# Flag spellings: Megatron-LM megatron/training/arguments.py @ core_v0.15.3.

# TP > 1 without FSDP on Hopper: validate_args requires one CUDA connection.
export CUDA_DEVICE_MAX_CONNECTIONS=1
GPUS_PER_NODE=8
NNODES=32
TP=8
PP=4

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NNODES
)

MODEL_ARGS=(
    --num-layers 80
    --hidden-size 8192
    --ffn-hidden-size 28672
    --num-attention-heads 64
    --group-query-attention
    --num-query-groups 8
    --seq-length 8192
    --max-position-embeddings 8192
    --vocab-size 128256
    --swiglu
    --normalization RMSNorm
    --position-embedding-type rope
    --rotary-base 500000
    --untie-embeddings-and-output-weights
    --disable-bias-linear
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 1024
    --bf16
    --recompute-granularity selective
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)

PARALLEL_ARGS=(
    --tensor-model-parallel-size ${TP}
    --pipeline-model-parallel-size ${PP}
    --num-layers-per-virtual-pipeline-stage 5
    --sequence-parallel
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${PARALLEL_ARGS[@]}
