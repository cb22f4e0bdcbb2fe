"""Real artifacts for the board plugin tests: a PyTorch profiler trace written the way training
code writes one, and a tiny TensorBoard plugin package (a wheel) with one plugin that works,
one that raises on import and one that raises when TensorBoard loads it."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

PACKAGE = "tbhub-tiny-plugins"
VERSION = "1.0"
# Entry point name -> what it does when a board loads it.
WORKS, IMPORT_FAILS, LOAD_FAILS = "tiny", "tiny_import_boom", "tiny_load_boom"
GREETING = "hello from the tiny plugin"

MODULES = {
    "tiny_plugins/__init__.py": "",
    "tiny_plugins/works.py": f'''\
from tensorboard.plugins import base_plugin
from werkzeug import wrappers


class Tiny(base_plugin.TBPlugin):
    plugin_name = "{WORKS}"

    def __init__(self, context):
        self.context = context

    def get_plugin_apps(self):
        return {{"/hello": self.hello}}

    def is_active(self):
        return True

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js")

    @wrappers.Request.application
    def hello(self, request):
        return wrappers.Response("{GREETING}", content_type="text/plain")
''',
    "tiny_plugins/import_boom.py": 'raise RuntimeError("this plugin breaks on import")\n',
    "tiny_plugins/load_boom.py": """\
from tensorboard.plugins import base_plugin


class LoadBoom(base_plugin.TBPlugin):
    plugin_name = "tiny_load_boom"

    def __init__(self, context):
        raise ValueError("this plugin breaks when TensorBoard loads it")

    def get_plugin_apps(self):
        return {}

    def is_active(self):
        return False
""",
}
ENTRY_POINTS = f"""\
[tensorboard_plugins]
{WORKS} = tiny_plugins.works:Tiny
{IMPORT_FAILS} = tiny_plugins.import_boom:Nothing
{LOAD_FAILS} = tiny_plugins.load_boom:LoadBoom
"""


def build_wheel(directory: Path) -> Path:
    """The package as a wheel in `directory` (what `pip install` reads from a find-links dir)."""
    directory.mkdir(parents=True, exist_ok=True)
    dist_info = f"{PACKAGE.replace('-', '_')}-{VERSION}.dist-info"
    files = {
        **MODULES,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n"
        "Requires-Dist: tensorboard\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tbhub-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
        f"{dist_info}/entry_points.txt": ENTRY_POINTS,
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = "\n".join(record) + "\n"
    wheel = directory / f"{PACKAGE.replace('-', '_')}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


def write_profiler_trace(run_dir: Path) -> Path:
    """A real `torch.profiler` trace of a few training steps, by tensorboard_trace_handler."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    model = torch.nn.Linear(32, 32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = schedule(wait=0, warmup=1, active=2, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=steps,
                 on_trace_ready=tensorboard_trace_handler(str(run_dir))) as profiler:  # fmt: skip
        for _ in range(4):
            optimizer.zero_grad()
            model(torch.randn(16, 32)).pow(2).mean().backward()
            optimizer.step()
            profiler.step()
    [trace] = run_dir.glob("*.pt.trace.json")
    return trace
