# Thin on purpose: fixtures live in fixtures/, logic in the wanbench package.
pytest_plugins = [
    "fixtures.options",
    "fixtures.cluster",
    "fixtures.faults",
    "fixtures.evidence",
    "fixtures.workloads",
    "fixtures.reporting",
    "fixtures.gate",
    "fixtures.sysbench",
    "fixtures.tpcc",
    "fixtures.ycsb",
    "fixtures.allure_report",
    "fixtures.availability",
]
