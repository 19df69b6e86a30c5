"""RESULTS.md and the scenario chart, from the measurements' results."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench import small_models, tracing


def chart(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["scenario"] for r in rows]
    x = range(len(names))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for ax, key, title in (
        (axes[0], "calls", "model calls per turn"),
        (axes[1], "executions", "tool executions per turn"),
    ):
        ax.bar(
            [i - 0.2 for i in x],
            [r["baseline"][key] for r in rows],
            0.4,
            label="baseline (seeds' start)",
            color="#c44e52",
        )
        ax.bar(
            [i + 0.2 for i in x],
            [r["engine"][key] for r in rows],
            0.4,
            label="chatloop engine",
            color="#4c72b0",
        )
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(results: dict, quick: bool) -> str:
    """RESULTS.md from the measurements in ``results``: every section whose measurements are there, in order (the
    smoke run's groups, ``python -m bench --only``, each measure some)::

        text = report({"scenarios": scenarios.measure(js_tool, 1), ...}, quick=True)
    """
    lines = [
        "# Benchmark results",
        "",
        f"- Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        f"- Python: {platform.python_version()} ({sys.executable.split('/')[-1]})",
        f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M UTC}"
        + ("  (quick smoke run: few repetitions)" if quick else ""),
        "- Reproduce: `make bench` (writes this file and `scenarios.png`)",
        "",
    ]
    for needs, section in SECTIONS:
        if all(name in results for name in needs):  # a group of the smoke run measures only some
            lines += section(results)
    return "\n".join(lines)


def _scenarios(results: dict) -> list[str]:
    rows = results["scenarios"]
    lines = [
        "## 1. Scenarios: this engine vs the seeds' starting point",
        "",
        "Baseline = `tool_choice` forced to `required`, `parallel_tool_calls` false, no success detection, no duplicate "
        "or loop detection, cap 8. The same scripted models (which obey `tool_choice` as real APIs enforce it) and the "
        "same real Deno sandbox run both. Prompt tokens are estimated from the requests sent (4 characters a token).",
        "",
        "| scenario | model calls (engine / baseline) | tool executions | prompt tokens | wall ms | stop reason (engine / baseline) | answer non-empty and correct |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        e, b = r["engine"], r["baseline"]
        lines.append(
            f"| {r['scenario']} | {e['calls']} / {b['calls']} | {e['executions']} / {b['executions']} | "
            f"{e['tokens']} / {b['tokens']} | {e['ms']:.1f} / {b['ms']:.1f} | {e['stop']} / {b['stop']} | "
            f"{'yes' if e['correct'] else 'no'} / {'yes' if b['correct'] else 'no'} |"
        )
    tot = {
        side: {k: sum(r[side][k] for r in rows) for k in ("calls", "executions", "tokens", "ms")}
        for side in ("engine", "baseline")
    }
    lines += [
        f"| **total** | {tot['engine']['calls']} / {tot['baseline']['calls']} | {tot['engine']['executions']} / "
        f"{tot['baseline']['executions']} | {tot['engine']['tokens']} / {tot['baseline']['tokens']} | "
        f"{tot['engine']['ms']:.0f} / {tot['baseline']['ms']:.0f} | | |",
        "",
        f"Ratios (baseline / engine): model calls **{tot['baseline']['calls'] / tot['engine']['calls']:.1f}×**, tool "
        f"executions **{tot['baseline']['executions'] / max(1, tot['engine']['executions']):.1f}×**, prompt tokens "
        f"**{tot['baseline']['tokens'] / tot['engine']['tokens']:.1f}×**, wall time "
        f"**{tot['baseline']['ms'] / tot['engine']['ms']:.1f}×**.",
        "",
        "![scenarios](scenarios.png)",
        "",
    ]
    return lines


def _overhead(results: dict) -> list[str]:
    lines: list[str] = []
    o = results["overhead"]
    lines += [
        "## 2. Engine overhead and the warm end-to-end turn",
        "",
        f"- Per iteration, instant scripted model and a no-op tool: **{o['per_iteration_us']:.0f} µs** (median)",
        "- Growth with conversation length (per iteration, median): "
        + ", ".join(f"{n} prior messages: {v:.0f} µs" for n, v in o["growth_us"].items()),
        f"- Per-request handler overhead (REST event through Mangum, instant model, no tools): "
        f"**{results['handler']['handler_overhead_us']:.0f} µs** (median)",
        f"- Warm end-to-end turn through the Lambda handler (one calculation: two model calls over loopback HTTP "
        f"through the groq SDK, one sandbox run): **{results['handler']['warm_turn_ms']:.1f} ms** median, "
        f"p90 {results['handler']['warm_turn_p90_ms']:.1f} ms over {results['handler']['warm_turns']} turns",
        "",
    ]
    return lines


def _sandbox(results: dict) -> list[str]:
    lines: list[str] = []
    s = results["sandbox"]
    lines += [
        "## 3. Sandbox (Deno, `--jitless`, rlimits, a fresh Worker per run in a reused process)",
        "",
        "| snippet | cold spawn median / p90 (ms) | pre-spawned median / p90 (ms) |",
        "|---|---|---|",
    ]
    for label in ("trivial", "compound"):
        c, w = s[label]["cold"], s[label]["prespawned"]
        lines.append(f"| {label} | {c[0]:.1f} / {c[1]:.1f} | {w[0]:.1f} / {w[1]:.1f} |")
    lines += [
        "",
        f"Targets: pre-spawned median ≤ 5 ms ({'met' if s['trivial']['prespawned'][0] <= 5 else 'MISSED'}), "
        f"cold median ≤ 25 ms ({'met' if s['trivial']['cold'][0] <= 25 else 'MISSED'}). "
        f"4 parallel runs: {s['parallel']['four_ms']:.1f} ms wall vs {s['parallel']['one_ms']:.1f} ms for one "
        f"(2 cores). A runaway (`while(true){{}}`, 1 s timeout) is killed {s['runaway_kill_ms']:.0f} ms after its "
        f"deadline. Peak RSS of a sandbox process: {s['peak_rss_mb']:.0f} MB.",
        "",
    ]
    if "cpu_per_run" in s:
        u = s["cpu_per_run"]
        lines += [
            "CPU per run (the compound snippet, sequential; the handler's side and every Deno process, the spare's "
            "replacement included), one run at a time on this machine:",
            "",
            "| | CPU per run (ms) | wall per run (ms) |",
            "|---|---|---|",
            f"| pre-spawned (the answering process serves the next run) | {u['prespawned_cpu_ms']:.1f} | "
            f"{u['prespawned_wall_ms']:.1f} |",
            f"| cold (a process started for the run) | {u['cold_cpu_ms']:.1f} | {u['cold_wall_ms']:.1f} |",
            "",
            f"Target: pre-spawned CPU per run ≤ 15 ms ({'met' if u['prespawned_cpu_ms'] <= 15 else 'MISSED'}); "
            "a process per run cost ~40 ms of CPU (measured before the change, same machine).",
            "",
        ]
    return lines


def _cold_start(results: dict) -> list[str]:
    lines: list[str] = []
    c = results["cold_start"]
    lambda_line = (
        f"- `import app` as on Lambda (bare python3.12 -I -B, only the built layer and function on sys.path, a read-only "
        f"tree): **{c['lambda_ms']:.0f} ms** median with the shipped unchecked-hash bytecode (budget 300 ms: "
        f"{'met' if c['lambda_ms'] <= 300 else 'over'}), {c['lambda_nopyc_ms']:.0f} ms with no bytecode at all (every "
        "module compiled, the standard library's too)"
        if c.get("lambda_ms")
        else "- `import app` as on Lambda: needs Python 3.12 to build the layer"
    )
    lines += [
        "## 4. Cold start",
        "",
        lambda_line,
        f"- `import app` from the development virtualenv (many more packages on sys.path): {c['app_ms']:.0f} ms "
        f"median; provider SDKs, boto3 and FastAPI still unimported: `{c['heavy_modules_after_import']}`",
        f"- With the groq SDK imported too (first Groq call): {c['app_groq_ms']:.0f} ms; with the openai SDK: "
        f"{c['app_openai_ms']:.0f} ms",
        "",
    ]
    return lines


def _fallback(results: dict) -> list[str]:
    lines: list[str] = []
    f, t = results["fallback"], results["throughput"]
    lines += [
        "## 5. Fallback overhead and local throughput",
        "",
        f"- First model answers 429, the second answers: the chain took {f['chain_ms']:.2f} ms vs "
        f"{f['direct_ms']:.2f} ms for the same two HTTP calls made directly: **{f['overhead_ms']:.2f} ms** added "
        f"(target ≤ 2 ms: {'met' if f['overhead_ms'] <= 2 else 'MISSED'})",
        f"- Local server (uvicorn, one worker), instant model, 8 concurrent clients: **{t['rps']:.0f} requests/s**, "
        f"{t['errors']} errors ({t['requests']} requests)",
        "",
    ]
    return lines


def _textcalls(results: dict) -> list[str]:
    lines: list[str] = []
    x = results["textcalls"]
    lines += [
        "## 6. Tool calls written as text",
        "",
        "Parser cost per response (`find_text_calls`, median µs): "
        + ", ".join(f"{label}: {us:.0f}" for label, us in x["parse_us"].items())
        + ".",
        "",
        f"Plain answers in SSE: the stream filter held back **{x['first_delta_held_chars']} characters** of the first "
        f"16-character delta (added time to first token: none beyond the filter's own "
        f"{x['filter_us_per_delta']:.1f} µs per delta).",
        "",
    ]
    return lines


def _streaming(results: dict) -> list[str]:
    lines: list[str] = []
    m = results["streaming"]
    lines += [
        "## 7. Response modes: stream (run.sh under the Web Adapter's contract) vs buffered (Mangum)",
        "",
        f"The same turn, a model writing its answer in pieces over {m['model_writes_ms']:.0f} ms (median ms):",
        "",
        "| mode | first SSE event | whole turn |",
        "|---|---|---|",
        f"| stream | {m['stream_first_event_ms']:.0f} | {m['stream_total_ms']:.0f} |",
        f"| buffered (the first byte is the last) | {m['buffered_first_byte_ms']:.0f} | {m['buffered_total_ms']:.0f} |",
        "",
        f"Stream mode's cold start: `run.sh` to the readiness path's first 200, **{m['run_sh_ready_ms']:.0f} ms** "
        "(uvicorn and `import app`), next to buffered mode's `import app`"
        + (f" of {results['cold_start']['app_ms']:.0f} ms" if "cold_start" in results else "")
        + " in section 4. On Lambda the adapter's own start comes on top.",
        "",
    ]
    return lines


def _responses(results: dict) -> list[str]:
    lines: list[str] = []
    r = results["responses"]
    lines += [
        "## 8. Responses API vs chat completions",
        "",
        "The same turn through the Lambda handler (an instant model, no tools), the two APIs alternating (median µs):",
        "",
        "| | chat completions | Responses API | ratio |",
        "|---|---|---|---|",
        f"| JSON | {r['chat_us']:.0f} | {r['responses_us']:.0f} | {r['ratio']:.3f} |",
        f"| streamed | {r['chat_stream_us']:.0f} | {r['responses_stream_us']:.0f} | {r['stream_ratio']:.3f} |",
        "",
        f"Target: the extra renderer costs ≤ 5 % ({'met' if max(r['ratio'], r['stream_ratio']) <= 1.05 else 'MISSED'}).",
        "",
    ]
    return lines


def _context(results: dict) -> list[str]:
    lines: list[str] = []
    x = results["context"]
    lines += [
        "## 9. Context estimator",
        "",
        f"Cost: **{x['estimate_us']:.0f} µs** per model call for a {x['messages']}-message history (median; the "
        "conversation is read once for every model of the chain).",
        "",
    ]
    if x["rows"]:
        lines += [
            "Error against real counts (o200k_base via the gpt-tokenizer npm package; positive = overestimate, the "
            "safe side). Cold: before the model has reported usage. Calibrated: after it reported usage for the same "
            "conversation five exchanges earlier.",
            "",
            "| 100-message history | real tokens | cold estimate | cold error | calibrated error |",
            "|---|---|---|---|---|",
        ]
        for kind, row in x["rows"].items():
            lines.append(
                f"| {kind} | {row['real']} | {row['cold']} | {row['cold_error']:+.0%} | {row['calibrated_error']:+.0%} |"
            )
        lines.append("")
    else:
        lines += ["(Real token counts need node and node_modules: `make install`.)", ""]
    return lines


def _idempotency(results: dict) -> list[str]:
    lines: list[str] = []
    d = results["idempotency"]
    lines += [
        "## 10. Retried requests (Idempotency-Key)",
        "",
        f"A fresh turn (the warm calculation of section 2): **{d['fresh_ms']:.1f} ms**; the same request retried, "
        f"replayed from its stored answer: **{d['replayed_ms']:.1f} ms** (medians over {d['turns']}; DynamoDB is moto "
        "in-process, so this is the handler's own cost, not DynamoDB's network latency).",
        "",
    ]
    return lines


def _page(results: dict) -> list[str]:
    lines: list[str] = []
    g = results["page"]
    paint = (
        f"**{g['first_paint_ms']:.0f} ms** median first contentful paint in Chromium from `make run`'s app on "
        f"loopback (target ≤ 300 ms: {'met' if g['first_paint_ms'] <= 300 else 'MISSED'})"
        if g["first_paint_ms"] is not None
        else "first paint not measured: Chromium is not installed (apt-get install chromium)"
    )
    lines += [
        "## 11. The chat page",
        "",
        f"- {paint}",
        f"- Page weight, every file it loads (HTML, CSS, its script, marked and DOMPurify): **{g['weight_bytes'] / 1000:.0f} KB** "
        f"uncompressed (target ≤ 150 KB: {'met' if g['weight_bytes'] <= 150_000 else 'MISSED'}), all served by the app",
        "",
    ]
    return lines


def _mcp(results: dict) -> list[str]:
    m = results["mcp"]
    return [
        "## 15. MCP tools",
        "",
        f"Against a local MCP server (the `mcp` SDK's MCPServer on 127.0.0.1, streamable HTTP, stateless), medians over "
        f"{m['reps']}:",
        "",
        "| what | ms |",
        "|---|---|",
        f"| the loop's own cost per MCP call (turn time less the calls' own time) | {m['loop_per_mcp_call_ms']:.2f} |",
        f"| the same for an in-process tool (the baseline) | {m['loop_per_local_call_ms']:.2f} |",
        f"| one MCP call's own time (connect, call, result described and fitted) | {m['mcp_call_ms']:.1f} |",
        f"| listing a server's tools, cold (first turn of a container) | {m['list_cold_ms']:.1f} |",
        f"| listing, cached (later turns, within MCP_TOOLS_TTL_SECONDS) | {m['list_cached_ms']:.3f} |",
        f"| importing the `mcp` SDK (once per container, on the first turn that lists a server) | {m['sdk_import_ms']:.0f} |",
        "",
    ]


def _fleet(results: dict) -> list[str]:  # bench/fleet.py: turns that live in the store
    from bench.fleet import section

    return section(results["fleet"])


def _state(results: dict) -> list[str]:  # compaction and approvals (bench/state.py)
    from bench.state import section

    return section(results["state"])


def _budgets(results: dict) -> list[str]:  # bench/budgets.py (#35)
    from bench import budgets

    return budgets.section(results["budgets"])


def _webhooks(results: dict) -> list[str]:  # bench/webhooks.py (#41)
    from bench import webhooks

    return webhooks.section(results["webhooks"])


def _bedrock(results: dict) -> list[str]:  # bench/bedrock.py (#43)
    from bench import bedrock

    return bedrock.section(results["bedrock"])


def _websocket(results: dict) -> list[str]:  # bench/websocket.py (#44)
    from bench import websocket

    return websocket.section(results["websocket"])


def _websocket_lambda(results: dict) -> list[str]:  # bench/websocket_lambda.py (#44)
    from bench import websocket_lambda

    return websocket_lambda.section(results["websocket_lambda"])


SECTIONS: list[tuple[tuple[str, ...], Callable[[dict], list[str]]]] = [
    (("scenarios",), _scenarios),
    (("overhead", "handler"), _overhead),
    (("sandbox",), _sandbox),
    (("cold_start",), _cold_start),
    (("fallback", "throughput"), _fallback),
    (("textcalls",), _textcalls),
    (("streaming",), _streaming),
    (("responses",), _responses),
    (("context",), _context),
    (("idempotency",), _idempotency),
    (("page",), _page),
    (("store",), lambda results: _store_section(results["store"])),
    (("fleet",), _fleet),
    (("lambda_size",), lambda results: lambda_size_section(results["lambda_size"])),
    (("ttft",), lambda results: ttft_section(results["ttft"])),
    (("mcp",), _mcp),
    (("state",), _state),
    (("against",), lambda results: against_section(results["against"])),
    (("tracing",), lambda results: tracing.section(results["tracing"])),
    (("budgets",), _budgets),
    (("small_models",), lambda results: small_models.section(results["small_models"])),
    (("webhooks",), _webhooks),
    (("bedrock",), _bedrock),
    (("websocket",), _websocket),
    (("websocket_lambda",), _websocket_lambda),
]
"""The report's sections in order, each with the measurements (``results``' keys, bench/__main__.py's steps) it
needs: a run that measured only some (``python -m bench --only``) writes only theirs."""


def against_section(a: dict) -> list[str]:
    """The hot path here against an earlier commit (bench/against.py), measured in one run."""
    names = {
        "engine_per_iteration_us": "engine, per iteration (instant model, a no-op tool)",
        "engine_1000_messages_us": "engine, per iteration after 1,000 prior messages",
        "handler_overhead_us": "handler, per request (REST event through Mangum, instant model)",
        "import_app_ms": "`import app` in a fresh interpreter (ms, the cold start's own part)",
    }
    lines = [
        f"## 16. Against {a['base_commit']} (before the re-cut)",
        "",
        f"Each tree measured by its own bench code in fresh interpreters, the two alternating, {a['rounds']} rounds "
        f"of {a['reps']} turns; medians (µs unless said, lower is better):",
        "",
        "| what | here | base | here / base |",
        "|---|---|---|---|",
    ]
    for key, row in a["metrics"].items():
        lines.append(
            f"| {names.get(key, key)} | {row['here']:.0f} | {row['base']:.0f} | {row['ratio']:.2f} |"
        )
    return [*lines, ""]


def _store_section(s: dict) -> list[str]:
    lines = [
        "## 12. The conversation store",
        "",
        f"A turn's two items (a ~180-character question, a ~600-character answer) appended to a conversation of "
        f"{s['history_messages']}+ messages, then the conversation read back (up to 100 items); medians over "
        f"{s['reps']} turns. DynamoDB is moto in-process: the store's own cost, not DynamoDB's network latency.",
        "",
        "| backend | write a turn (ms) | read the conversation (ms) |",
        "|---|---|---|",
    ]
    lines += [f"| {n} | {s[n]['write_ms']:.2f} | {s[n]['read_ms']:.2f} |" for n in ("sqlite", "dynamodb")]
    lines += [
        "",
        "Request bytes of a `/v1/responses` turn: the whole history as input items, against naming the conversation "
        "and sending only the new message.",
        "",
        "| messages | history resent | conversation id | saved |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {row['messages']:,} | {row['full_bytes']:,} | {row['by_id_bytes']:,} | {row['saved_bytes']:,} |"
        for row in s["bytes"]
    ]
    lines += [
        "",
        "A `/v1/responses` turn through the real handler (an instant model: the handler's own cost) after N earlier "
        "messages: the history resent as input, against `previous_response_id` (the chain of stored responses "
        "followed back, two reads each) and `conversation` (its items read, the turn appended); medians, ms.",
        "",
        "| backend | messages | history resent | previous_response_id | conversation |",
        "|---|---|---|---|---|",
    ]
    for backend, rows in s.get("continued", {}).items():
        lines += [
            f"| {backend} | {r['messages']} | {r['resent_ms']:.1f} | {r['previous_response_id_ms']:.1f} "
            f"| {r['conversation_ms']:.1f} |"
            for r in rows
        ]
    lines.append("")
    return lines


def _span(values: list[float], digits: int = 0) -> str:
    low, high = min(values), max(values)
    fmt = f"{{:.{digits}f}}"
    return (
        fmt.format(low)
        if fmt.format(low) == fmt.format(high)
        else f"{fmt.format(low)}\u2013{fmt.format(high)}"
    )


def lambda_size_section(x: dict) -> list[str]:
    """Section 13: the built artefacts under a cgroup sized like each MemorySize, this tree vs the previous main."""
    lines = ["## 13. Lambda-sized: the built artefacts at 512 / 1,024 / 1,769 MB", ""]
    if "skipped" in x:
        return [*lines, f"Skipped: {x['skipped']}.", ""]
    lines += [
        "`build/layer.zip` + `build/function.zip` as `scripts/package.py` builds them, unpacked read-only, run by "
        "`python3.12 -I -B` with only those on `sys.path` (as an unprivileged user where the interpreter allows it), in "
        "a cgroup "
        f"({x['cgroup']}) whose CPU is MemorySize / 1,769 of a core and whose memory is MemorySize; compound-interest "
        "turns through the real handler (REST API events, the groq SDK over loopback) against a model that takes "
        f"{x['model_seconds'] * 1000:.0f} ms a call (two calls a turn; their time is excluded). **Cold**: process "
        "start → first turn answered. **Restored**: the after-restore hooks → first turn answered, in a process forked "
        "from one that ran `import app` and the before-snapshot hooks (one snapshot, a copy per sample). Medians of "
        f"{x['runs']} runs each; in brackets the previous main ({x['base_commit']}) measured in the same run, the two "
        "trees alternating sample by sample (this machine is shared: compare the ratio, not the absolute time). "
        "The CPU columns are the handler process's own CPU until that answer (main in square brackets), and in "
        "parentheses that CPU divided by the size's share: what it costs in wall time at that share, were none of it hidden "
        "behind the model's time (the spare Deno process, the chunk schema: they are).",
        "",
        "| MemorySize (vCPU) | cold | restored | cold: CPU used (÷ share) | restored: CPU used (÷ share) "
        "| warm overhead a turn | `import app` | peak RSS (handler + Deno) | GB-s a turn at 1 s a model call |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(row: dict, key: str, unit: str = " ms", bold: bool = False) -> str:
        here, base = row["here"].get(key), row["base"].get(key)
        if here is None:
            return "—"
        value = f"{here['median']:.0f}{unit}"
        value = f"**{value}**" if bold else value
        if base is None:
            return value
        return f"{value} ({base['median']:.0f}; ×{here['median'] / base['median']:.2f})"

    def cpu(row: dict, key: str) -> str:
        here, base = row["here"].get(key), row["base"].get(key)
        if here is None:
            return "—"
        share = row["cpu_share"]
        value = f"{here['median']:.0f} ms ({here['median'] / share:,.0f})"
        return value if base is None else f"{value} [{base['median']:.0f} ({base['median'] / share:,.0f})]"

    def warm(row: dict) -> str:
        text = cell(row, "warm_overhead_ms")
        here, base = row["here"].get("warm_cpu_ms"), row["base"].get("warm_cpu_ms")
        if here is not None:
            text += f", CPU {here['median']:.0f} ms" + (
                f" [{base['median']:.0f}]" if base is not None else ""
            )
        return text

    for size, row in x["sizes"].items():
        lines.append(
            f"| {int(size):,} MB ({row['cpu_share']:.2f}) | {cell(row, 'cold_ms', bold=True)} "
            f"| {cell(row, 'restored_ms', bold=True)} | {cpu(row, 'cold_cpu_ms')} | {cpu(row, 'restored_cpu_ms')} "
            f"| {warm(row)} "
            f"| {cell(row, 'import_ms')} "
            f"| {cell(row, 'peak_rss_mb', ' MB')} | {row['gb_s_per_turn']:.2f} |"
        )
    lines.append("")
    at_512 = x["sizes"].get("512")
    if at_512:
        verdicts = []
        for key, what in (
            ("cold_ms", "cold"),
            ("restored_ms", "restored"),
            ("warm_overhead_ms", "warm overhead"),
        ):
            target, value = x["targets_at_512"][key], at_512["here"][key]["median"]
            verdict = f"{what} ≤ {target:,.0f} ms: {value:,.0f} ms, {'met' if value <= target else 'MISSED'}"
            cpu_key = key.replace("_ms", "_cpu_ms")
            if cpu_key in at_512["here"]:
                alone = at_512["here"][cpu_key]["median"] / at_512["cpu_share"]
                verdict += f" ({alone:,.0f} ms by its CPU: {'met' if alone <= target else 'MISSED'})"
            verdicts.append(verdict)
        lines += [f"Targets at 512 MB (issue #34): {'; '.join(verdicts)}.", ""]
    lines += _bedrock_chain_lines(x)
    counted = x.get("instructions_m", {})
    if "here" in counted:
        base = counted.get("base")
        lines += [
            "Instructions from the handler process's start to the first answer (all its threads; callgrind, which "
            "no other load on the machine moves): "
            f"**{counted['here']:,.0f} M**"
            + (f" (main {base:,.0f} M; ×{counted['here'] / base:.2f})" if base else "")
            + ".",
            "",
        ]
    compiled, twice, opened = x.get("compiled", {}), x.get("read_twice", {}), x.get("files_opened", {})
    if compiled:
        lines += [
            "A cold start, checked with an audit hook (untimed): modules compiled from source (each would be compiled on "
            "every cold start: the code directories are read-only): "
            + ", ".join(f"{label} {len(files)}" for label, files in compiled.items())
            + "; files of the artefacts opened more than once (of those opened): "
            + ", ".join(
                f"{label} {len(twice.get(label, []))} (of {opened.get(label, '?')})" for label in compiled
            )
            + ".",
            "",
        ]
    generated, tables = x.get("generated", {}), x.get("codecache", {})
    if generated:
        parts = []
        for label, by_module in generated.items():
            table = tables.get(label)
            top = sorted(by_module.items(), key=lambda kv: -kv[1])[:3]
            parts.append(
                f"{label} {sum(by_module.values()):,}"
                + (f" ({', '.join(f'{m} {n}' for m, n in top)})" if top else "")
                + (
                    f", the shipped table serving {table['hits']:,} (missing {table['misses']})"
                    if table
                    else ", no shipped table"
                )
            )
        lines += [
            "Texts compiled as modules ran (dataclasses' methods, typing's forward references; regular expressions "
            "are parsed without such an event) in that cold start: " + "; ".join(parts) + ".",
            "",
        ]
    return lines


def _bedrock_chain_lines(x: dict) -> list[str]:
    """Section 13's Bedrock-only chain (issue #43): the same first turn from a fake Bedrock Runtime, against this
    tree's Groq chain in the same run ("no worse than today's")."""
    rows = {size: row for size, row in x["sizes"].items() if "bedrock" in row}
    if not rows:
        return []
    lines = [
        "**A Bedrock-only chain** (issue #43): this tree's artefacts again with `MODEL_CHAIN=bedrock:"
        f"{x.get('bedrock_model', 'amazon.nova-lite-v1:0')}`, the same turn from a fake Bedrock Runtime on loopback "
        "(ConverseStream's event stream through botocore's real client, `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, fake "
        "credentials; botocore is in the layer for DynamoDB already), alternating with the two runs above. In brackets "
        "this tree's Groq chain from the same run, and the ratio (main has no `bedrock:` provider):",
        "",
        "| MemorySize (vCPU) | chain | cold | restored | cold: CPU used | restored: CPU used | warm overhead a turn "
        "| `import app` | peak RSS |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(row: dict, key: str, unit: str = " ms") -> str:
        ours, groq = row["bedrock"][key]["median"], row["here"][key]["median"]
        return f"{ours:.0f}{unit} ({groq:.0f}; ×{ours / groq:.2f})" if groq else f"{ours:.0f}{unit}"

    for size, row in rows.items():
        lines.append(
            f"| {int(size):,} MB ({row['cpu_share']:.2f}) | `bedrock:` | **{cell(row, 'cold_ms')}** "
            f"| **{cell(row, 'restored_ms')}** | {cell(row, 'cold_cpu_ms')} | {cell(row, 'restored_cpu_ms')} "
            f"| {cell(row, 'warm_overhead_ms')}, CPU {cell(row, 'warm_cpu_ms')} | {cell(row, 'import_ms')} "
            f"| {cell(row, 'peak_rss_mb', ' MB')} |"
        )
    lines.append("")
    counted, check = x.get("instructions_m", {}), x.get("bedrock_check")
    notes = []
    if "bedrock" in counted and "here" in counted:
        notes.append(
            f"instructions to the first answer {counted['bedrock']:,.0f} M (the Groq chain's "
            f"{counted['here']:,.0f} M; ×{counted['bedrock'] / counted['here']:.2f})"
        )
    if check:
        notes.append(
            f"modules compiled from source {len(check['compiled'])}, files of the artefacts opened more than once "
            f"{len(check['read_twice'])} (of {check['files_opened']})"
        )
        table = check.get("codecache")
        if table:
            notes.append(f"the shipped code tables serving {table['hits']:,} (missing {table['misses']})")
    if notes:
        lines += ["Its cold start: " + "; ".join(notes) + ".", ""]
    return lines


def ttft_section(t: dict) -> list[str]:
    """Time to first token on each route (bench/ttft.py): the server's added time over the model's first token."""
    names = {"chat": "`/chat`", "chat_completions": "`/v1/chat/completions`", "responses": "`/v1/responses`"}
    d = t["direct"]
    lines = [
        "## 14. Time to first token",
        "",
        f"A streaming upstream (Groq's wire through the groq SDK, on loopback, in this process) that writes its first "
        f"token {t['model_first_token_ms']:.0f} ms after the request, then writes for {t['model_writes_ms']:.0f} ms. "
        "Added = the client's first content delta minus the moment the upstream wrote the first token, one clock; "
        f"median over {t['reps']} runs of each route, streamed (ms):",
        "",
        "| route | client's first content delta after its request | added over the model's first token |",
        "|---|---|---|",
        f"| the model read directly (the floor: loopback and SSE parsing) | {d['first_delta_ms']:.0f} | "
        f"{d['added_ms']:.1f} |",
    ]
    for route, row in t["routes"].items():
        lines.append(f"| {names.get(route, route)} | {row['first_delta_ms']:.0f} | {row['added_ms']:.1f} |")
    same = t["spread_ms"] <= t["same_ms"]
    lines += [
        "",
        f"Target: ≤ {t['target_ms']:.0f} ms added on every route ({'met' if t['met'] else 'MISSED'}), and the same on "
        f"`/chat` and `/v1` (within {t['same_ms']:.0f} ms of each other: {t['spread_ms']:.1f} ms, "
        f"{'met' if same else 'MISSED'}).",
        "",
    ]
    return lines
