"""Real models on xe2rt kernels (optional extra `models`: safetensors, tokenizers, tqdm). `xe2rt.models.minilm`:
all-MiniLM-L6-v2 sentence embeddings. `xe2rt.models.llm`: decoder LLMs (Llama-3.x, Qwen3, Qwen3-MoE) from Hugging
Face folders, float or 4-bit (docs/llm.md); `xe2rt.models.random`: random checkpoints in those layouts."""
