"""The keyed kernel cache (``skwgrad.cache.store``): SQLite index + sha256-verified code objects."""

from skwgrad.cache.store import Cache, CacheEntry, default_cache_dir

__all__ = ["Cache", "CacheEntry", "default_cache_dir"]
