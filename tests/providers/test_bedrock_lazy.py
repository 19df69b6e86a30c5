"""Cold start with Bedrock: ``import app`` and building a chain with a ``bedrock:`` member import no botocore client
(it is imported when a Bedrock member is first called, and boto3 never: botocore's own session makes the client), and
a SnapStart snapshot primes botocore without a client or credentials."""

from __future__ import annotations

import json
import subprocess
import sys

from chatloop.config import Settings
from chatloop.providers import bedrock, warmup
from chatloop.snapstart import sdk_modules
from tests.support.adapter import ROOT

PROBE = """
import asyncio, json, sys
sys.path[:0] = [sys.argv[1] + "/src", sys.argv[1]]
import app
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.providers.base import ModelRequest
from chatloop.providers.factory import build_chain

def loaded():
    # (the botocore package itself is Powertools' import: its user agent; its client machinery is not)
    return sorted(
        m for m in ("boto3", "s3transfer", "botocore.client", "botocore.eventstream") if m in sys.modules
    )

seen = [loaded()]
chain = build_chain(Settings(model_chain="bedrock:amazon.nova-lite-v1:0"), {})
seen.append([chain.entries(), loaded()])

async def call():
    request = ModelRequest(messages=[{"role": "user", "content": "hi"}], deadline=Deadline.after(5))
    try:
        async for _ in chain.for_turn().stream(request):
            pass
    except Exception as exc:
        return type(exc).__name__
print(json.dumps([*seen, asyncio.run(call()), loaded()]))
"""


def test_botocore_is_imported_when_a_bedrock_member_is_first_called_not_by_import_app_and_boto3_never():
    """boto3 on top of botocore is ~18 ms of CPU (s3transfer and multiprocessing: ~60 ms at 512 MB) a Bedrock
    client does not use."""
    env = {
        "PATH": "/usr/bin:/bin",
        "POWERTOOLS_SERVICE_NAME": "t",
        "POWERTOOLS_LOG_LEVEL": "ERROR",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "AKIAFAKE",
        "AWS_SECRET_ACCESS_KEY": "fake",
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "http://127.0.0.1:9",  # nothing listens: the call fails, after importing
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    after_import, after_chain, failure, after_call = json.loads(done.stdout.strip().splitlines()[-1])
    assert after_import == [] and after_chain == [["bedrock:amazon.nova-lite-v1:0"], []]
    assert failure == "AllModelsFailed" and after_call == ["botocore.client", "botocore.eventstream"]


def test_a_snapshot_primes_botocore_for_a_bedrock_chain_without_a_client_or_credentials():
    settings = Settings(
        model_chain="bedrock:us.anthropic.claude-haiku-4-5-20251001-v1:0,groq:llama-3.3-70b-versatile"
    )
    assert sdk_modules(settings) == ["botocore", "groq"]
    bedrock.drop_clients()
    bedrock._PRIMED_SESSION.clear()
    warmup.prime_modules(
        "botocore"
    )  # what Runtime.prime runs for it, once per process (an earlier test's call may have)
    (session,) = bedrock._PRIMED_SESSION
    assert not bedrock._CLIENTS and session._credentials is None


def test_after_a_snapshot_the_first_bedrock_client_reads_no_botocore_data(monkeypatch):
    """The priming parses every data file a ``bedrock-runtime`` client needs (its service model and endpoint rules,
    botocore's 1.2 MB endpoints.json, the partitions, the SDK defaults), so the client built after a restore reads
    none: at 512 MB, endpoints.json alone is ~60 ms of the first turn's CPU."""
    from botocore.loaders import JSONFileLoader

    for name, value in {
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "AKIAFAKE",
        "AWS_SECRET_ACCESS_KEY": "fake",
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "http://127.0.0.1:9",
    }.items():
        monkeypatch.setenv(name, value)
    bedrock.drop_clients()
    bedrock._PRIMED_SESSION.clear()
    warmup.prime_modules("botocore")
    read: list[str] = []
    original = JSONFileLoader.load_file
    monkeypatch.setattr(
        JSONFileLoader, "load_file", lambda self, path: read.append(path) or original(self, path)
    )
    try:
        built = bedrock.client("us-east-1")
    finally:
        bedrock.drop_clients()
    assert built.meta.service_model.service_name == "bedrock-runtime"
    assert [p.split("/data/")[-1] for p in read] == []


def test_the_endpoint_resolver_resolves_bedrock_as_botocores_own_at_half_the_parse():
    """The session's endpoint resolver parses botocore's endpoints.json into plain dicts (half the CPU of the
    loader's ordered dicts, ~30 ms at 512 MB on a cold start): it resolves what botocore's own resolves."""
    import json as plain_json
    from collections import OrderedDict

    import botocore.session

    ours = bedrock._session()._get_internal_component("endpoint_resolver")
    theirs = botocore.session.Session()._get_internal_component("endpoint_resolver")
    assert type(ours._endpoint_data["partitions"][0]) is dict  # not botocore's OrderedDict: the cheaper parse
    assert plain_json.dumps(ours._endpoint_data) == plain_json.dumps(theirs._endpoint_data)  # same order too
    assert isinstance(theirs._endpoint_data["partitions"][0], OrderedDict)
    assert ours.uses_builtin_data == theirs.uses_builtin_data
    for region in ("us-east-1", "eu-west-3", "ap-southeast-2", "us-gov-west-1", "cn-north-1", "xx-nowhere-1"):
        for fips in (False, True):
            for dualstack in (False, True):
                asked = ("bedrock-runtime", region)
                flags = {"use_fips_endpoint": fips, "use_dualstack_endpoint": dualstack}
                assert ours.construct_endpoint(*asked, **flags) == theirs.construct_endpoint(*asked, **flags)


SNAPSHOT_PROBE = """
import json, sys
sys.path[:0] = [sys.argv[1] + "/src", sys.argv[1]]
import app
from chatloop.config import Settings
from chatloop.snapstart import sdk_modules

after_import = "chatloop.providers.bedrock" in sys.modules
settings = Settings(model_chain="bedrock:amazon.nova-lite-v1:0")
app.app.state.runtime.prime(sdk_modules(settings))  # what a snapshot (or the code cache's build) runs
from chatloop.providers import bedrock
print(json.dumps([after_import, len(bedrock._PRIMED_SESSION), len(bedrock._CLIENTS)]))
"""


def test_the_bedrock_member_is_imported_by_a_chain_or_a_snapshot_that_names_bedrock_not_by_import_app():
    """~4 ms of every cold start (the member and its Converse mapping) left to the chains that name Bedrock; a
    snapshot of such a chain still primes botocore (the member registers its priming when imported)."""
    env = {"PATH": "/usr/bin:/bin", "POWERTOOLS_SERVICE_NAME": "t", "POWERTOOLS_LOG_LEVEL": "ERROR"}
    env["AWS_REGION"] = "us-east-1"
    done = subprocess.run(
        [sys.executable, "-c", SNAPSHOT_PROBE, str(ROOT)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    after_import, primed_sessions, clients = json.loads(done.stdout.strip().splitlines()[-1])
    assert after_import is False
    assert primed_sessions == 1 and clients == 0
