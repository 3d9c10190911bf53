"""analysis.audit"""
