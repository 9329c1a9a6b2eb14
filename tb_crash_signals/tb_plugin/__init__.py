"""tb_plugin"""
