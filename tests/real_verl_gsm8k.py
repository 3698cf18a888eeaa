"""GSM8K rows in real verl's layout, as its examples/data_preprocess/gsm8k.py writes them: the data of the
tests that run real verl's command lines through main_ppo (tests/real_verl, and the real-verl key tests of
other components)."""


def write_gsm8k(path, n, start=0, long_from=None):
    """`n` rows (questions `start + i`) written as parquet at `path`; from row `long_from` on, ~400-token prompts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for i in range(start, start + n):
        question = f"What is {i} + 2?" if long_from is None or i - start < long_from else "word " * 80
        rows.append({"data_source": "openai/gsm8k", "ability": "math",
                     "prompt": [{"role": "user", "content": question + " Let's think step by step and output "
                                 "the final answer after \"####\"."}],
                     "reward_model": {"style": "rule", "ground_truth": str(i + 2)},
                     "extra_info": {"split": "train", "index": i}})
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return str(path)
