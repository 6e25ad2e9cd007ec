"""The storage layer (private): bytes under names, on local disk or an object store.

Modules: :mod:`.base` (the :class:`Storage` protocol, :func:`check_name`,
:func:`open_storage`), :mod:`.local` (:class:`LocalStorage`), :mod:`.staged`
(:class:`FsspecStorage`, the object-store writer), :mod:`.readonly`
(:class:`ReadOnlyStorage`, the object-store reader), :mod:`.objectops` (how each object
store appends), :mod:`.spill` (the local spill journal), :mod:`.fileio` (``write_all``).
The public face is :mod:`rllog.storage`.
"""
