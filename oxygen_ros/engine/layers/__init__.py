"""The shared building blocks every family builds on (no family imported here): packed
linears, norms, attention, RoPE and MRoPE, the decoder, seeded random init, the RTC
guidance every action expert shares, and EngineModel, the interface the engine calls."""
