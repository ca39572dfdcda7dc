# The harness's pytest plugin is loaded from pytest.ini (-p harness.plugin).
