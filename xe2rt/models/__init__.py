"""Real models on xe2rt kernels (optional extra `models`: safetensors, tokenizers). `xe2rt.models.minilm`:
all-MiniLM-L6-v2 sentence embeddings."""
