"""The NHWC EP's tests run on the ep-host pytest plugin (the EP author kit) with the NHWC
provider under test. The plugin loads through its ``pytest11`` entry point once ep-host is
installed; from a checkout whose install predates the entry point it is loaded here."""

import os
from importlib.metadata import entry_points

import pytest

if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD") or not any(
        ep.value == "ep_host.testing.pytest_plugin" for ep in entry_points(group="pytest11")):
    pytest_plugins = ["ep_host.testing.pytest_plugin"]


@pytest.fixture
def ep_host_provider():
    return "nhwc"
