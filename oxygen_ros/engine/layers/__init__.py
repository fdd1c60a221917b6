"""The shared building blocks every family builds on (no family imported here): packed
linears, norms, attention, RoPE and MRoPE, the decoder, seeded random init, the RTC
guidance every action expert shares, the heads' Euler-step record (flow_steps) and
plain-dict configs (dict_config), and EngineModel, the interface the engine calls."""
