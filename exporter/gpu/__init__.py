"""GPU sources for the gpu collector: the backend protocol, real NVML, and recorded-profile replay."""
