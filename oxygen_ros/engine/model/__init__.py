"""The π0.5-style Mixture-of-Transformers network: vision encoder, backbone decoder, action expert."""
