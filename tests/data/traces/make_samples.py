#!/usr/bin/env python3
"""Writes small, seeded samples of the LLM trace formats tessera reads (common/llm_trace.hpp).

The rows are generated, not cut from the public traces: the same columns and value formats, with
lengths small enough for the test servers (prompts 4..120 tokens, outputs 1..24).
  * tessera.csv      arrival_seconds,prompt_tokens,output_tokens (what tessera-loadgen --write-trace writes)
  * azure_2023.csv   AzurePublicDataset AzureLLMInferenceTrace_{code,conv}.csv:
                     TIMESTAMP (7 fractional digits, no zone),ContextTokens,GeneratedTokens
  * azure_2024.csv   AzureLLMInferenceTrace_*_1week.csv: TIMESTAMP with microseconds and +00:00
  * burstgpt.csv     BurstGPT_*.csv: Timestamp (seconds),Model,Request tokens,Response tokens,
                     Total tokens,Log Type; one failed request (Response tokens 0) the readers skip
Run from anywhere: python3 tests/data/traces/make_samples.py (rewrites the four files beside it).
"""
import datetime
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
N = 24


def rows(seed):
    rng = random.Random(seed)
    t = 0.0
    out = []
    for _ in range(N):
        t += rng.expovariate(8.0)  # about 8 requests per second
        out.append((t, rng.randint(4, 120), rng.randint(1, 24)))
    return out


def write(name, text):
    with open(os.path.join(HERE, name), "w", newline="") as f:
        f.write(text)


def main():
    own = "arrival_seconds,prompt_tokens,output_tokens\n"
    own += "".join(f"{t:.6f},{p},{o}\n" for t, p, o in rows(1))
    write("tessera.csv", own)

    # Azure's two years: the same columns, timestamps written as each year's file writes them.
    for name, seed, start, stamp in [
            ("azure_2023.csv", 2, datetime.datetime(2023, 11, 16, 18, 15, 46),
             lambda ts: ts.strftime("%Y-%m-%d %H:%M:%S.") + f"{ts.microsecond:06d}0"),
            ("azure_2024.csv", 3, datetime.datetime(2024, 5, 10, 0, 0, 0),
             lambda ts: ts.strftime("%Y-%m-%d %H:%M:%S.%f") + "+00:00")]:
        az = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        for t, p, o in rows(seed):
            az += stamp(start + datetime.timedelta(seconds=t)) + f",{p},{o}\n"
        write(name, az)

    bg = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    rng = random.Random(4)
    for i, (t, p, o) in enumerate(rows(4)):
        model = rng.choice(["ChatGPT", "GPT-4"])
        kind = rng.choice(["Conversation log", "API log"])
        if i == 5:
            o = 0  # a failed request: BurstGPT logs it with 0 response tokens
        bg += f"{int(round(100 + t * 10))},{model},{p},{o},{p + o},{kind}\n"
    write("burstgpt.csv", bg)


if __name__ == "__main__":
    main()
