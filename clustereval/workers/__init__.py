"""Code that runs ON a node: stdlib + torch + pynvml only. Each worker prints JSON lines."""
