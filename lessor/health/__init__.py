"""What the kubelet's probes ask, and the watchdogs and memory settling behind them."""
